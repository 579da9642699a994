/**
 * `${VAR}` references in manifest values (upstream §0): a value that is exactly `${NAME}`, NAME
 * matching `[A-Z_][A-Z0-9_]*` after trimming, stands for that environment variable. Anything else
 * (`${lower}`, `x${VAR}`, `$VAR`) is a literal. One rule, no partial interpolation: a reader can
 * tell at a glance whether a value is a secret reference or the secret itself.
 */
const REFERENCE = /^\$\{([A-Z_][A-Z0-9_]*)\}$/;

/** The variable a value refers to, or undefined when the value is a literal. */
export function envReferenceName(value: string): string | undefined {
  return REFERENCE.exec(value.trim())?.[1];
}

export type EnvLookup = Readonly<Record<string, string | undefined>>;

/**
 * The value with its reference resolved: `{ ok: true, value }`, or `{ ok: false, name }` naming
 * the variable that is not set. A variable set to the empty string resolves to the empty string.
 */
export function resolveEnvReference(value: string, env: EnvLookup): { ok: true; value: string } | { ok: false; name: string } {
  const name = envReferenceName(value);
  if (name === undefined) return { ok: true, value };
  const resolved = env[name];
  return resolved === undefined ? { ok: false, name } : { ok: true, value: resolved };
}

/** Every variable name referenced anywhere in a manifest's text: what a client must pass along. */
export function referencedEnvNames(text: string): string[] {
  const names = new Set<string>();
  for (const match of text.matchAll(/\$\{([A-Z_][A-Z0-9_]*)\}/g)) if (match[1]) names.add(match[1]);
  return [...names].sort();
}
