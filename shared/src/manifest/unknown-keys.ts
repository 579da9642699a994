import type * as z from 'zod';

type Path = Array<string | number>;

/** Wrappers whose schema for the value is their `innerType`. */
const WRAPPERS = new Set(['optional', 'default', 'prefault', 'nullable', 'nonoptional', 'readonly', 'catch']);

/** The schema a wrapped one stands for: optional, default and the like taken off, a pipe's input. */
function unwrapped(schema: z.core.$ZodType): z.core.$ZodType {
  let current = schema;
  for (let depth = 0; depth < 16; depth += 1) {
    const def = current._zod.def as { type: string; innerType?: z.core.$ZodType; in?: z.core.$ZodType };
    if (WRAPPERS.has(def.type) && def.innerType) current = def.innerType;
    else if (def.type === 'pipe' && def.in) current = def.in;
    else break;
  }
  return current;
}

/**
 * The keys of `value` that `schema` has no field for, as paths, below the root: a plain object
 * schema drops such a key without a word, so `capabilities: {containmnet: sealed}` ran at the
 * default floor, the author's misspelt one nowhere said. Only plain objects are judged (one that
 * takes any key, a record, a union's options are not), and arrays by their element's schema.
 */
export function unknownNestedKeys(schema: z.core.$ZodType, value: unknown, path: Path = []): Path[] {
  const inner = unwrapped(schema);
  const def = inner._zod.def as { type: string; shape?: Record<string, z.core.$ZodType>; catchall?: z.core.$ZodType; element?: z.core.$ZodType };
  if (def.type === 'array' && def.element && Array.isArray(value)) {
    const element = def.element;
    return value.flatMap((item, index) => unknownNestedKeys(element, item, [...path, index]));
  }
  if (def.type !== 'object' || !def.shape || def.catchall !== undefined) return [];
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [];
  const shape = def.shape;
  const found: Path[] = [];
  for (const [key, item] of Object.entries(value)) {
    const field = Object.hasOwn(shape, key) ? shape[key] : undefined;
    if (field === undefined) {
      // The root's own keys are the caller's (`W-SEC-019` for a top-level key, in upstream's words).
      if (path.length > 0) found.push([...path, key]);
      continue;
    }
    found.push(...unknownNestedKeys(field, item, [...path, key]));
  }
  return found;
}
