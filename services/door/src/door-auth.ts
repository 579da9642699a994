import { MurmurError } from '@murmur/shared';
import { bearerOf, configuredTokenRefusal, tokenMatcher } from '@murmur/shared/node';

/**
 * Who may talk to the sessions behind a door. Without `MURMUR_DOOR_AUTH` anyone who reaches the
 * door may (it binds loopback unless told otherwise). With it, every JSON-RPC request must carry
 * `Authorization: Bearer <token>`, where the token is one of
 * - the operator's tokens: the comma-separated entries of `MURMUR_DOOR_AUTH` (each at least 16
 *   characters), good for every session behind the door;
 * - with the entry `session`, the session's own token, which its launch returned (`mur run --json`
 *   prints it) and which is good for that session alone. Only the executor holding the session
 *   can tell whether a token is its own, so that check (`SessionTokens`) is made after this one.
 * Anything else is refused with 401 and `WWW-Authenticate` before the request is read, so a refusal
 * says nothing about the session it named.
 *
 * The agent card stays readable without credentials (it is how a client learns the scheme), and
 * declares it. A delegated child's completion is the one request let through without a token: it
 * names its delegation (`x-murmur-delegation-id`, a UUIDv7 with 74 random bits, known only to the
 * parent and the child) and the session it reports to, and the parent's host admits it only into the task that
 * awaits exactly that delegation — the delegation id is that post's credential, good for nothing
 * else. So what those headers admit is a plain send and nothing more (`completion`): the door
 * checks the method once it has read the request, since the headers alone cannot be checked by
 * anyone but the host, and anyone can write them.
 */
export interface DoorAuth {
  readonly required: boolean;
  /** Whether a session's own token admits to it (`MURMUR_DOOR_AUTH` names `session`). */
  readonly sessionTokens: boolean;
  /**
   * What a request with these headers may do: reach its session (`admitted`), reach it only if its
   * bearer is the session's own token (`session-token`, with that bearer), reach it only as a
   * delegated child's completion (`completion`: a plain send, which the host judges), or nothing
   * (`refused`).
   */
  judge(headers: { authorization?: string | undefined; delegationId?: string | undefined; completionSession?: string | undefined }): AuthVerdict;
  /** The card's declaration of the scheme, in both generations' shapes; empty without auth. */
  readonly cardFields: Record<string, unknown>;
}

export type AuthVerdict = { verdict: 'admitted' } | { verdict: 'session-token'; token: string } | { verdict: 'completion' } | { verdict: 'refused' };

/** The methods a completion is posted with (`message/send`, or its 1.0 name): a plain send, never a stream. */
export const COMPLETION_METHODS: ReadonlySet<string> = new Set(['message/send', 'SendMessage']);

export const DOOR_AUTH_SCHEME = 'murmur_bearer';
export const WWW_AUTHENTICATE = 'Bearer realm="murmur door"';
/** The `MURMUR_DOOR_AUTH` entry that makes a door take each session's own token. */
export const SESSION_TOKENS_ENTRY = 'session';

const ADMITTED: AuthVerdict = { verdict: 'admitted' };
const REFUSED: AuthVerdict = { verdict: 'refused' };
const COMPLETION: AuthVerdict = { verdict: 'completion' };

export function doorAuth(env: NodeJS.ProcessEnv): DoorAuth {
  const configured = env.MURMUR_DOOR_AUTH;
  if (configured === undefined) return { required: false, sessionTokens: false, judge: () => ADMITTED, cardFields: {} };
  const entries = configured
    .split(',')
    .map((token) => token.trim())
    .filter((token) => token !== '');
  // Set, but to nothing (`MURMUR_DOOR_AUTH="$TOKEN"` with TOKEN unset, a stray comma): whoever set
  // it meant the door to ask for credentials, so it does not start open.
  if (entries.length === 0) {
    throw new MurmurError('E-CFG-003', `MURMUR_DOOR_AUTH is set (to ${JSON.stringify(configured)}) but names no token`, {
      path: 'MURMUR_DOOR_AUTH',
      hint: `give it tokens (long random values, e.g. \`openssl rand -hex 32\`, separated by commas) or '${SESSION_TOKENS_ENTRY}'; unset it to serve without credentials`,
    });
  }
  const sessionTokens = entries.includes(SESSION_TOKENS_ENTRY);
  const tokens = entries.filter((entry) => entry !== SESSION_TOKENS_ENTRY);
  for (const token of tokens) {
    const refusal = configuredTokenRefusal(token, {
      setting: 'MURMUR_DOOR_AUTH',
      named: `MURMUR_DOOR_AUTH's token ${entries.indexOf(token) + 1}`,
      what: 'door',
      hint: `use long random values, e.g. \`openssl rand -hex 32\`, separated by commas (or '${SESSION_TOKENS_ENTRY}' for each session's own token)`,
    });
    if (refusal) throw refusal;
  }
  const matcher = tokenMatcher(tokens);
  const description = [
    ...(tokens.length > 0 ? ['a bearer token this door was given (MURMUR_DOOR_AUTH)'] : []),
    ...(sessionTokens ? ["the session's own token, which its launch returned (mur run prints it as its token)"] : []),
  ].join(', or ');
  return {
    required: true,
    sessionTokens,
    judge: ({ authorization, delegationId, completionSession }) => {
      const bearer = bearerOf(authorization);
      if (matcher.admits(bearer)) return ADMITTED;
      if (isDelegationId(delegationId) && completionSession !== undefined && completionSession !== '') return COMPLETION;
      if (sessionTokens && bearer !== undefined && bearer.length <= 512) return { verdict: 'session-token', token: bearer };
      return REFUSED;
    },
    cardFields: {
      // 0.3 reads `type`/`scheme` and `security`; 1.0 reads `httpAuthSecurityScheme` and `securityRequirements`.
      securitySchemes: { [DOOR_AUTH_SCHEME]: { type: 'http', scheme: 'bearer', description, httpAuthSecurityScheme: { scheme: 'Bearer', description } } },
      security: [{ [DOOR_AUTH_SCHEME]: [] }],
      securityRequirements: [{ schemes: { [DOOR_AUTH_SCHEME]: { list: [] } } }],
    },
  };
}

function isDelegationId(value: string | undefined): boolean {
  return value !== undefined && /^dlg_[0-9a-f]{32}$/.test(value);
}
