import * as z from 'zod';

/** Asking the bus where a door is, so `mur run` can print a session's URL before it launches it. */
export const DoorLocateRequestSchema = z.object({});
export const DoorLocateReplySchema = z.object({
  /** The door's base URL (`http://127.0.0.1:7730`); a session is served at `<base>/sessions/<id>`. */
  base_url: z.string().url(),
  door_id: z.string(),
});
export type DoorLocateReply = z.infer<typeof DoorLocateReplySchema>;

/** A session's URL at a door: the agent card and the JSON-RPC endpoint are relative to it. */
export function sessionUrl(baseUrl: string, sessionId: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/sessions/${sessionId}`;
}
