import { MurmurError } from '@murmur/shared';
import { MIN_BEARER_TOKEN_LENGTH, bearerOf, tokenMatcher } from '@murmur/shared/node';

/**
 * Who may talk to the sessions behind a door. Without `MURMUR_DOOR_AUTH` anyone who reaches the
 * door may (it binds loopback unless told otherwise); with it — a comma-separated list of bearer
 * tokens, each at least 16 characters — every JSON-RPC request must carry one of them as
 * `Authorization: Bearer <token>`, or it is refused with 401 and `WWW-Authenticate` before
 * anything reaches the bus, so a refusal says nothing about the session it named.
 *
 * The agent card stays readable without credentials (it is how a client learns the scheme), and
 * declares it. A delegated child's completion is the one request let through without a token: it
 * names its delegation (`x-murmur-delegation-id`, a UUIDv7 with 74 random bits, known only to the
 * parent and the child) and the session it reports to, and the parent's host admits it only into the task that
 * awaits exactly that delegation — the delegation id is that post's credential, good for nothing
 * else.
 */
export interface DoorAuth {
  readonly required: boolean;
  /** Whether a request with these headers may reach its session. */
  admits(headers: { authorization?: string | undefined; delegationId?: string | undefined; completionSession?: string | undefined }): boolean;
  /** The card's declaration of the scheme, in both generations' shapes; empty without auth. */
  readonly cardFields: Record<string, unknown>;
}

export const DOOR_AUTH_SCHEME = 'murmur_bearer';
export const WWW_AUTHENTICATE = 'Bearer realm="murmur door"';

export function doorAuth(env: NodeJS.ProcessEnv): DoorAuth {
  const tokens = (env.MURMUR_DOOR_AUTH ?? '')
    .split(',')
    .map((token) => token.trim())
    .filter((token) => token !== '');
  if (tokens.length === 0) return { required: false, admits: () => true, cardFields: {} };
  const short = tokens.findIndex((token) => token.length < MIN_BEARER_TOKEN_LENGTH);
  if (short >= 0) {
    throw new MurmurError(
      'E-CFG-003',
      `MURMUR_DOOR_AUTH's token ${short + 1} is ${tokens[short]?.length} characters long; a door token needs at least ${MIN_BEARER_TOKEN_LENGTH}`,
      { path: 'MURMUR_DOOR_AUTH', hint: 'use long random values, e.g. `openssl rand -hex 32`, separated by commas' },
    );
  }
  const matcher = tokenMatcher(tokens);
  const description = 'a bearer token this door was given (MURMUR_DOOR_AUTH)';
  return {
    required: true,
    admits: ({ authorization, delegationId, completionSession }) =>
      matcher.admits(bearerOf(authorization)) || (isDelegationId(delegationId) && completionSession !== undefined && completionSession !== ''),
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
