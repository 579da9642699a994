import * as z from 'zod';

/** Asking the bus where a door is, so `mur run` can print a session's URL before it launches it. */
export const DoorLocateRequestSchema = z.object({});
export const DoorLocateReplySchema = z.object({
  /** The door's base URL (`http://localhost:7730`); a session is served at `<base>/sessions/<id>`. */
  base_url: z.string().url(),
  door_id: z.string(),
  /**
   * What the door asks of a client (`MURMUR_DOOR_AUTH`): whether it needs a bearer token at all,
   * and whether a session's own token (the launch's `token`) is one it takes. Absent from a door
   * that predates it: taken as no credentials needed.
   */
  credentials: z.object({ required: z.boolean(), session_tokens: z.boolean() }).optional(),
});
/** What a door asks of its clients, as `door.locate` says it. */
export type DoorCredentials = NonNullable<z.infer<typeof DoorLocateReplySchema>['credentials']>;
export type DoorLocateReply = z.infer<typeof DoorLocateReplySchema>;

/** A session's URL at a door: the agent card and the JSON-RPC endpoint are relative to it. */
export function sessionUrl(baseUrl: string, sessionId: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/sessions/${sessionId}`;
}

/**
 * The base URL a door names itself by, from the address it listens on: loopback is
 * `localhost`, as upstream's cards and URLs say, so a card read on one machine names the door the
 * way a person types it. Only the loopback addresses `localhost` resolves to (`127.0.0.1`, `::1`):
 * the name must still reach the door, and a door bound to `127.0.0.2` named `localhost` would name
 * where nothing listens, so any other address of 127/8 is kept. The unspecified address
 * (`0.0.0.0`, `[::]`: every interface) is no address a client can reach, so it is named by `machineAddress`, this machine's own address on
 * its network when it has one (the door's `MURMUR_DOOR_PUBLIC_URL` names it otherwise); any other
 * address is kept. Only the name changes: the door still listens where it was bound.
 */
export function doorPublicUrl(listenerUrl: string, machineAddress: () => string | undefined = () => undefined): string {
  const url = new URL(listenerUrl);
  const host = url.hostname;
  if (host === '127.0.0.1' || host === '[::1]') url.hostname = 'localhost';
  else if (host === '0.0.0.0' || host === '[::]') {
    const address = machineAddress();
    url.hostname = address === undefined ? 'localhost' : address.includes(':') ? `[${address}]` : address;
  }
  return url.href.replace(/\/+$/, '');
}
