import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { MurmurError } from '../errors.js';

/**
 * Bearer tokens, checked as a service that faces a network must check them: by their SHA-256 in
 * constant time, against every accepted token whatever matched first, so that neither the time a
 * refusal takes nor a length check tells how much of a guess was right. A token is never logged.
 */
export interface TokenMatcher {
  admits(presented: string | undefined): boolean;
  /** Whether the token whose SHA-256 (`tokenDigest`) is `digestHex` is admitted: compared as `admits` compares. */
  admitsDigest(digestHex: string): boolean;
}

/** The minimum length of a token: a short one is a password, guessable over the network. */
export const MIN_BEARER_TOKEN_LENGTH = 16;

/** The setting a token came from, as a refusal names it: the variable, and the token in it when it holds several. */
export interface ConfiguredToken {
  /** The variable (`MURMUR_ROOST_TOKEN`). */
  setting: string;
  /** How the token is named, when not by the variable alone (`MURMUR_DOOR_AUTH's token 2`). */
  named?: string;
  /** What it admits to (`publishing`, `door`). */
  what: string;
  hint: string;
}

/**
 * Why a token a service was configured with cannot serve, as `E-CFG-003` naming the setting and
 * never the token; or undefined. Too short, it is guessable over the network. A character outside
 * visible ASCII is sent differently by each client (curl as UTF-8, Node's fetch not at all, and a
 * header is read here as latin1), so such a token admitted some clients and not others, or none.
 */
export function configuredTokenRefusal(token: string, from: ConfiguredToken): MurmurError | undefined {
  const named = from.named ?? from.setting;
  if (token.length < MIN_BEARER_TOKEN_LENGTH)
    return new MurmurError('E-CFG-003', `${named} is ${token.length} characters long; a ${from.what} token needs at least ${MIN_BEARER_TOKEN_LENGTH}`, {
      path: from.setting,
      hint: from.hint,
    });
  const odd = [...token].findIndex((character) => character < '!' || character > '~');
  if (odd >= 0)
    return new MurmurError(
      'E-CFG-003',
      `${named} holds a character that is not visible ASCII (character ${odd + 1}), which clients send in different encodings, so some would be refused with the right token`,
      { path: from.setting, hint: from.hint },
    );
  return undefined;
}

export function tokenMatcher(tokens: readonly string[]): TokenMatcher {
  const expected = tokens.map(digest);
  const matches = (given: Buffer): boolean => {
    let admitted = false;
    for (const candidate of expected) admitted = timingSafeEqual(given, candidate) || admitted;
    return admitted;
  };
  return {
    admits: (presented) => presented !== undefined && matches(digest(presented)),
    admitsDigest(digestHex) {
      const given = Buffer.from(digestHex, 'hex');
      return given.length === 32 && given.toString('hex') === digestHex.toLowerCase() && matches(given);
    },
  };
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerOf(authorization: string | undefined): string | undefined {
  return /^Bearer\s+(.+)$/i.exec(authorization?.trim() ?? '')?.[1]?.trim();
}

/**
 * A session's own door token, minted by the executor at launch: 256 random bits, so it cannot be
 * guessed, prefixed so that a leaked one is recognisable for what it is.
 */
export function newSessionToken(): string {
  return `mst_${randomBytes(32).toString('base64url')}`;
}

/** The SHA-256 of a token, hex: what is kept and compared instead of the token itself. */
export function tokenDigest(value: string): string {
  return digest(value).toString('hex');
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}
