import { MurmurError } from '../errors.js';

/**
 * Key-value state on the bus: a bucket of string values under simple keys, shared by everyone on
 * the same bus. In-process it lives in memory for as long as the transport does; over NATS it is a
 * JetStream KV bucket, so it outlives the process that wrote it and a nats-server restart.
 *
 * Keys follow NATS KV's rule, checked the same way on both transports: letters, digits and
 * `- / _ = .`, not starting or ending with `.`, and no empty `..` token (`session.<id>`,
 * `approval.<sha256 hex>`). Bucket names are letters, digits, `-` and `_`.
 */
export interface KeyValueEntry {
  readonly value: string;
  /** Changes on every write to the key; what `update` compares against. */
  readonly revision: number;
}

export interface KeyValueStore {
  readonly bucket: string;
  get(key: string): Promise<string | undefined>;
  /** The value with its revision, for a compare-and-set `update`. */
  entry(key: string): Promise<KeyValueEntry | undefined>;
  put(key: string, value: string): Promise<void>;
  /** Writes only if the key holds nothing: `false` when it already does. Atomic. */
  create(key: string, value: string): Promise<boolean>;
  /** Writes only if the key is still at `revision`: `false` when someone wrote it since. Atomic. */
  update(key: string, value: string, revision: number): Promise<boolean>;
  delete(key: string): Promise<void>;
  /** Every key holding a value (deleted keys are not listed). */
  keys(): Promise<string[]>;
}

const KEY = /^[-/_=.a-zA-Z0-9]+$/;
const BUCKET = /^[-_a-zA-Z0-9]+$/;
const encoder = new TextEncoder();

export function isValidKeyValueKey(key: string): boolean {
  return KEY.test(key) && !key.startsWith('.') && !key.endsWith('.') && !key.includes('..');
}

export function isValidBucketName(bucket: string): boolean {
  return BUCKET.test(bucket);
}

export function assertBucketName(bucket: string): void {
  if (!isValidBucketName(bucket)) {
    throw new MurmurError('E-BUS-001', `'${bucket}' cannot name a key-value bucket: use letters, digits, '-' and '_'`, { path: bucket });
  }
}

/** The one check both transports share, so a key accepted in-process is accepted by NATS too. */
export function checkedKeyValueStore(store: KeyValueStore, maxValueBytes: number): KeyValueStore {
  const key = (candidate: string): string => {
    if (typeof candidate !== 'string' || !isValidKeyValueKey(candidate)) {
      throw new MurmurError(
        'E-BUS-001',
        `'${String(candidate)}' cannot be a key in bucket '${store.bucket}': use letters, digits and '-/_=.', not starting or ending with '.'`,
        { path: `${store.bucket}/${String(candidate)}` },
      );
    }
    return candidate;
  };
  const value = (k: string, candidate: string): string => {
    const bytes = encoder.encode(candidate).byteLength;
    if (bytes > maxValueBytes)
      throw new MurmurError('E-BUS-001', `the value for '${k}' in bucket '${store.bucket}' is ${bytes} bytes, over the bus's ${maxValueBytes}-byte limit`, {
        path: `${store.bucket}/${k}`,
      });
    return candidate;
  };
  return {
    bucket: store.bucket,
    get: async (k) => store.get(key(k)),
    entry: async (k) => store.entry(key(k)),
    put: async (k, v) => store.put(key(k), value(k, v)),
    create: async (k, v) => store.create(key(k), value(k, v)),
    update: async (k, v, revision) => store.update(key(k), value(k, v), revision),
    delete: async (k) => store.delete(key(k)),
    keys: () => store.keys(),
  };
}
