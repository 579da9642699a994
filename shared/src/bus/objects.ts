import { MurmurError } from '../errors.js';

/**
 * Objects on the bus: named byte strings of any size, shared by everyone on the same bus. This is
 * how what is larger than a message crosses between services — a packed capsule project, a
 * transpiled bundle, a payload file — so no service ever needs another's disk. Over NATS it is a
 * JetStream object store (chunked, file-backed, it survives a server restart that keeps its
 * storage); in-process it is a map that lives as long as the transport.
 *
 * The store itself promises nothing about content: names are chosen by writers. Callers that need
 * integrity (everything in Murmur does) name objects by the sha256 of their bytes and verify the
 * digest when they read (`BlobCache` in `@murmur/shared/node`).
 */
export interface ObjectInfo {
  readonly name: string;
  readonly size: number;
}

/**
 * Where an object's bytes come from when it is written: bytes in hand, or a way to open them as a
 * stream, which the in-process store keeps unopened until someone reads (a file on the one machine
 * is never copied into memory just to be handed to a neighbour in the same process).
 */
export type ObjectSource = { bytes: Uint8Array } | { size: number; open: () => AsyncIterable<Uint8Array> };

export interface ObjectStore {
  readonly bucket: string;
  /** The object's name and size, or undefined when there is none by that name. */
  info(name: string): Promise<ObjectInfo | undefined>;
  /** Writes (or replaces) the object. */
  put(name: string, source: ObjectSource): Promise<ObjectInfo>;
  /** The object's bytes as a stream of chunks, or undefined when there is none by that name. */
  get(name: string): Promise<AsyncIterable<Uint8Array> | undefined>;
  delete(name: string): Promise<void>;
}

/** NATS' rule for object names, applied on both transports: printable, no spaces or wildcards. */
const OBJECT_NAME = /^[-_=.a-zA-Z0-9/]+$/;

export function isValidObjectName(name: string): boolean {
  return typeof name === 'string' && name.length > 0 && name.length <= 255 && OBJECT_NAME.test(name) && !name.startsWith('.') && !name.endsWith('.');
}

/** The one name check both transports share, so a name accepted in-process is accepted by NATS too. */
export function checkedObjectStore(store: ObjectStore): ObjectStore {
  const named = (name: string): string => {
    if (!isValidObjectName(name)) {
      throw new MurmurError('E-BUS-001', `'${String(name)}' cannot name an object in bucket '${store.bucket}': use letters, digits and '-_=./' (at most 255)`, {
        path: `${store.bucket}/${String(name)}`,
      });
    }
    return name;
  };
  return {
    bucket: store.bucket,
    info: async (name) => store.info(named(name)),
    put: async (name, source) => store.put(named(name), source),
    get: async (name) => store.get(named(name)),
    delete: async (name) => store.delete(named(name)),
  };
}

/** The bytes of a source, in chunks. */
export async function* sourceChunks(source: ObjectSource): AsyncIterable<Uint8Array> {
  if ('bytes' in source) {
    yield source.bytes;
    return;
  }
  yield* source.open();
}
