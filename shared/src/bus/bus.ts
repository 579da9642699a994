import * as z from 'zod';
import { MurmurError, type MurmurErrorJson, isErrorCode } from '../errors.js';
import type { Log } from '../log.js';
import { type KeyValueStore, assertBucketName, checkedKeyValueStore } from './kv.js';
import { type ObjectStore, checkedObjectStore } from './objects.js';
import { isValidPattern } from './subject.js';
import { type CommandTopic, type EventTopic, isConcrete } from './topic.js';
import { runtimeMetrics } from '../metrics-sink.js';
import { systemFailureCode, systemFailureHint } from '../node/system-failure.js';
import { type BusConnectionState, type GatherWindow, type RawMessage, type Transport, TransportError } from './transport.js';

export interface MessageInfo {
  readonly subject: string;
}

export interface Subscription {
  unsubscribe(): void;
}

export interface SubscribeOptions {
  /** Members of one queue group share the messages: each goes to exactly one of them. */
  queue?: string;
}

export interface RequestOptions {
  timeoutMs?: number;
}

export const DEFAULT_REQUEST_TIMEOUT_MS = 5_000;

/** What a `gather` heard: the good replies, and the refused ones as `request` would have thrown them. */
export interface Gathered<R> {
  replies: R[];
  refused: MurmurError[];
}

/**
 * The bus every service speaks: typed topics, payloads validated by their zod schema on send
 * and again on receipt, and errors that travel back to the requester as catalogue codes.
 *
 * A payload that fails validation is refused and logged with its subject; it never reaches a
 * handler and never takes the receiving service down. A handler that throws is logged too (and,
 * for a request, answered with its error), for the same reason: one bad message must not cost a
 * service its other sessions.
 */
/** A subscription pattern the bus cannot take (`E-BUS-001`), refused before anything is asked. */
export function refuseInvalidPattern(pattern: string): void {
  if (!isValidPattern(pattern))
    throw new MurmurError('E-BUS-001', `'${pattern}' is not a valid subject pattern`, {
      hint: "use dot-separated tokens, '*' for one token and '>' for the rest, e.g. 'session.>'",
    });
}

export interface Bus {
  /** `in-process`, or the NATS server URL. */
  readonly description: string;
  /** The most bytes one message may carry (the server's `max_payload`): a reply over it is refused. */
  readonly maxPayload: number;
  publish<T, TInput>(topic: EventTopic<T, TInput>, payload: TInput): void;
  subscribe<T, TInput>(topic: EventTopic<T, TInput>, handler: (payload: T, info: MessageInfo) => unknown, options?: SubscribeOptions): Subscription;
  /** Every message on `pattern`, undecoded past JSON: what a monitor such as `mur events` wants. */
  tap(pattern: string, handler: (subject: string, payload: unknown) => unknown): Subscription;
  request<Q, R, QInput, RInput>(topic: CommandTopic<Q, R, QInput, RInput>, payload: QInput, options?: RequestOptions): Promise<R>;
  /**
   * A census: `topic` asked of every subscriber at once (each instance of a scaled service, where
   * `request` hears the first), every reply collected until `window.quietMs` pass with no new one
   * after the last, or `window.timeoutMs` with none. Each reply is read as `request` reads its
   * one: good ones in `replies`, errors and broken ones in `refused`, as `request` would have
   * thrown them. Nobody answering is nothing in either.
   */
  gather<Q, R, QInput, RInput>(topic: CommandTopic<Q, R, QInput, RInput>, payload: QInput, window: GatherWindow): Promise<Gathered<R>>;
  serve<Q, R, QInput, RInput>(
    topic: CommandTopic<Q, R, QInput, RInput>,
    handler: (payload: Q, info: MessageInfo) => RInput | Promise<RInput>,
    options?: SubscribeOptions,
  ): Subscription;
  /**
   * Key-value state shared by everyone on this bus (see `KeyValueStore`): in memory for the
   * in-process bus, a JetStream KV bucket on NATS. Created on first use. A lost or closed bus is
   * `E-BUS-005`, a store that does not answer in time `E-BUS-003`, a bad key `E-BUS-001`.
   */
  keyValue(bucket: string): Promise<KeyValueStore>;
  /**
   * Objects of any size shared by everyone on this bus (see `ObjectStore`): in memory for the
   * in-process bus, a JetStream object store on NATS. Created on first use; failures map as for
   * `keyValue`.
   */
  objectStore(bucket: string): Promise<ObjectStore>;
  /** Told when the bus connection is lost, when it is back, and when it is closed for good (`BusConnectionState`); never, in-process. */
  onConnectionChange(listener: (state: BusConnectionState, reason?: string) => void): void;
  /** Whether the server is there now (always, in-process). */
  readonly connected: boolean;
  flush(): Promise<void>;
  close(): Promise<void>;
}

const ErrorJsonSchema = z.object({
  code: z.string(),
  message: z.string(),
  hint: z.string().optional(),
  path: z.string().optional(),
});

/** How a reply travels: the handler's value, or the error it refused with. */
const ReplyEnvelopeSchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), data: z.unknown() }),
  z.object({ ok: z.literal(false), error: ErrorJsonSchema }),
]);

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function encode(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

function decode(data: Uint8Array): unknown {
  return JSON.parse(decoder.decode(data));
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => (issue.path.length > 0 ? `${issue.path.join('.')}: ${issue.message}` : issue.message))
    .join('; ');
}

function toErrorJson(error: unknown): MurmurErrorJson {
  if (error instanceof MurmurError) return error.toJSON();
  const message = error instanceof Error ? error.message : String(error);
  // The operating system's refusal of a file operation (a home that is a file, a read-only or full
  // disk) is the user's to mend: said with its code and what to do, not as the service's failure.
  const hint = systemFailureHint(error);
  if (hint) {
    const failed = (error as NodeJS.ErrnoException).path;
    // Node's message names the path for an open, never for a write: said either way.
    const where = failed !== undefined && !message.includes(failed) ? ` (${failed})` : '';
    return { code: systemFailureCode(error), message: `the service could not do its work: ${message}${where}`, hint, ...(failed ? { path: failed } : {}) };
  }
  return { code: 'E-BUS-006', message: `the service failed while handling the request: ${message}` };
}

/**
 * A message the bus refused to send for its size: over what the transport carries. Its own class,
 * so a sender can tell its caller the request was too large (the caller's to mend) rather than
 * read it out of a message's words.
 */
export class PayloadTooLarge extends MurmurError {
  constructor(
    subject: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super('E-BUS-001', `refused to send on '${subject}': payload is ${bytes} bytes, over the bus's ${limit}-byte limit`, { path: subject });
  }
}

export function createBus(transport: Transport, log: Log): Bus {
  function refuseOnSend(subject: string, reason: string): never {
    log.warn({ subject, reason }, 'refused to send an invalid bus payload');
    throw new MurmurError('E-BUS-001', `refused to send on '${subject}': ${reason}`, { path: subject });
  }

  function validateOutgoing<T, TInput>(subject: string, schema: z.ZodType<T, TInput>, payload: TInput): T {
    if (!isConcrete({ subject })) refuseOnSend(subject, 'a message needs a concrete subject, not a pattern');
    const parsed = schema.safeParse(payload);
    if (!parsed.success) refuseOnSend(subject, `payload does not match its contract: ${describeIssues(parsed.error)}`);
    return parsed.data;
  }

  /** Decode and validate a received payload, or log and return undefined. */
  function receive<T, TInput>(message: RawMessage, schema: z.ZodType<T, TInput>): { ok: true; value: T } | { ok: false; reason: string } {
    let raw: unknown;
    try {
      raw = decode(message.data);
    } catch {
      const reason = 'payload is not JSON';
      log.warn({ subject: message.subject, reason }, 'refused an invalid bus payload');
      return { ok: false, reason };
    }
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const reason = `payload does not match its contract: ${describeIssues(parsed.error)}`;
      log.warn({ subject: message.subject, reason }, 'refused an invalid bus payload');
      return { ok: false, reason };
    }
    return { ok: true, value: parsed.data };
  }

  /** Encodes for the wire, refusing what the transport could not carry. */
  function encodeFor(subject: string, value: unknown): Uint8Array {
    const bytes = encode(value);
    if (bytes.byteLength > transport.maxPayload) {
      const refusal = new PayloadTooLarge(subject, bytes.byteLength, transport.maxPayload);
      log.warn({ subject, reason: refusal.message }, 'refused to send an invalid bus payload');
      throw refusal;
    }
    return bytes;
  }

  /**
   * One reply read as `request` reads it: the envelope (`E-BUS-002` when it is not one), the
   * replier's own error with its code (`E-BUS-006` for a code this catalogue does not know), and
   * the reply's contract (`E-BUS-002`, logged).
   */
  function decodeReply<Q, R, QInput, RInput>(
    topic: CommandTopic<Q, R, QInput, RInput>,
    data: Uint8Array,
  ): { ok: true; value: R } | { ok: false; error: MurmurError } {
    const envelope = receive({ subject: topic.subject, data }, ReplyEnvelopeSchema);
    if (!envelope.ok)
      return { ok: false, error: new MurmurError('E-BUS-002', `refused the reply on '${topic.subject}': ${envelope.reason}`, { path: topic.subject }) };
    if (!envelope.value.ok) {
      const { code, message, hint, path } = envelope.value.error;
      return { ok: false, error: new MurmurError(isErrorCode(code) ? code : 'E-BUS-006', message, { hint, path }) };
    }
    const reply = topic.reply.safeParse(envelope.value.data);
    if (!reply.success) {
      const reason = `payload does not match its contract: ${describeIssues(reply.error)}`;
      log.warn({ subject: topic.subject, reason }, 'refused an invalid bus reply');
      return { ok: false, error: new MurmurError('E-BUS-002', `refused the reply on '${topic.subject}': ${reason}`, { path: topic.subject }) };
    }
    return { ok: true, value: reply.data };
  }

  /**
   * What to do when no member of `service`'s queue group answers a request: none is connected
   * (start one), or none replied in time (is one there, and keeping up?). On the in-process bus
   * the process itself started its services, so either is a bug of its own.
   */
  function silentServiceHint(service: string, failure: 'timeout' | 'no-responders'): string {
    if (transport.description === 'in-process')
      return `this process's own ${service} did not answer: that is a bug in mur; please report it with the command you ran`;
    return failure === 'no-responders'
      ? `start the ${service} service, connected to ${transport.description} ('mur health' lists what answers), or unset MURMUR_NATS_URL to run everything in-process`
      : `check that the ${service} service is connected to ${transport.description} and keeping up ('mur health' says), then try again`;
  }

  function closed(subject: string): MurmurError {
    return new MurmurError('E-BUS-005', `the bus connection to ${transport.description} is closed`, { path: subject });
  }

  /** Maps a transport's failure in a key-value or object operation onto the catalogue. */
  function storeFailure(kind: 'key-value' | 'object', bucket: string, error: unknown): unknown {
    if (!(error instanceof TransportError)) return error;
    const path = `${kind === 'key-value' ? 'kv' : 'obj'}:${bucket}`;
    if (error.failure === 'timeout')
      // A bucket is the NATS server's own (JetStream), not a service's: the catalogue's hint about the service is not for it.
      return new MurmurError('E-BUS-003', `the ${kind} bucket '${bucket}' on ${transport.description} did not answer in time: ${error.message}`, {
        path,
        hint: `the NATS server at ${transport.description} answers for its buckets: check that it runs and is not overloaded or stalled, then run again`,
      });
    if (error.failure === 'no-responders') {
      return new MurmurError('E-BUS-005', `no ${kind} store answers for bucket '${bucket}' on ${transport.description}: ${error.message}`, {
        path,
        hint: 'start nats-server with JetStream enabled (-js -sd <dir>), or wait for it to come back',
      });
    }
    return new MurmurError('E-BUS-005', `the bus connection to ${transport.description} is closed`, { path });
  }

  async function guarded<T>(kind: 'key-value' | 'object', bucket: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      throw storeFailure(kind, bucket, error);
    }
  }

  function mappedKeyValue(store: KeyValueStore): KeyValueStore {
    const guard = <T>(run: () => Promise<T>): Promise<T> => guarded('key-value', store.bucket, run);
    return {
      bucket: store.bucket,
      get: (key) => guard(() => store.get(key)),
      entry: (key) => guard(() => store.entry(key)),
      put: (key, value) => guard(() => store.put(key, value)),
      create: (key, value) => guard(() => store.create(key, value)),
      update: (key, value, revision) => guard(() => store.update(key, value, revision)),
      delete: (key) => guard(() => store.delete(key)),
      keys: () => guard(() => store.keys()),
    };
  }

  function mappedObjects(store: ObjectStore): ObjectStore {
    const guard = <T>(run: () => Promise<T>): Promise<T> => guarded('object', store.bucket, run);
    return {
      bucket: store.bucket,
      info: (name) => guard(() => store.info(name)),
      put: (name, source) => guard(() => store.put(name, source)),
      get: async (name) => {
        const chunks = await guard(() => store.get(name));
        if (!chunks) return undefined;
        return (async function* () {
          try {
            yield* chunks;
          } catch (error) {
            throw storeFailure('object', store.bucket, error);
          }
        })();
      },
      delete: (name) => guard(() => store.delete(name)),
    };
  }

  function runHandler(subject: string, run: () => unknown): void {
    try {
      const result = run();
      if (result instanceof Promise) {
        result.catch((error: unknown) => log.error({ subject, err: error }, 'bus handler failed'));
      }
    } catch (error) {
      log.error({ subject, err: error }, 'bus handler failed');
    }
  }

  return {
    description: transport.description,
    get maxPayload() {
      return transport.maxPayload;
    },

    publish(topic, payload) {
      const valid = validateOutgoing(topic.subject, topic.schema, payload);
      try {
        transport.publish(topic.subject, encodeFor(topic.subject, valid));
      } catch (error) {
        if (error instanceof TransportError) throw closed(topic.subject);
        throw error;
      }
    },

    subscribe(topic, handler, options = {}) {
      return transport.subscribe(
        topic.subject,
        (message) => {
          const received = receive(message, topic.schema);
          if (!received.ok) return;
          runHandler(message.subject, () => handler(received.value, { subject: message.subject }));
        },
        options.queue,
      );
    },

    tap(pattern, handler) {
      refuseInvalidPattern(pattern);
      return transport.subscribe(pattern, (message) => {
        // Reply inboxes are plumbing, not traffic: over NATS a `>` tap would otherwise see every
        // reply, which the in-process bus never routes through subjects at all.
        if (message.subject.startsWith('_INBOX.')) return;
        let payload: unknown;
        try {
          payload = decode(message.data);
        } catch {
          payload = decoder.decode(message.data);
        }
        runHandler(message.subject, () => handler(message.subject, payload));
      });
    },

    async request(topic, payload, options = {}) {
      const timeoutMs = options.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
      const valid = validateOutgoing(topic.subject, topic.request, payload);
      let replyBytes: Uint8Array;
      const started = performance.now();
      const count = (ok: boolean): void => runtimeMetrics().busRequest(topic.pattern, (performance.now() - started) / 1000, ok);
      try {
        replyBytes = await transport.request(topic.subject, encodeFor(topic.subject, valid), timeoutMs);
        count(true);
      } catch (error) {
        count(false);
        if (error instanceof TransportError) {
          if (error.failure === 'timeout')
            throw new MurmurError('E-BUS-003', `no reply on '${topic.subject}' within ${timeoutMs} ms`, {
              path: topic.subject,
              ...(topic.answeredBy ? { hint: silentServiceHint(topic.answeredBy, 'timeout') } : {}),
            });
          if (error.failure === 'no-responders')
            throw new MurmurError('E-BUS-004', `no service answers '${topic.subject}' on ${transport.description}`, {
              path: topic.subject,
              ...(topic.answeredBy ? { hint: silentServiceHint(topic.answeredBy, 'no-responders') } : {}),
            });
          throw closed(topic.subject);
        }
        throw error;
      }
      const reply = decodeReply(topic, replyBytes);
      if (!reply.ok) throw reply.error;
      return reply.value;
    },

    async gather<Q, R, QInput, RInput>(topic: CommandTopic<Q, R, QInput, RInput>, payload: QInput, window: GatherWindow): Promise<Gathered<R>> {
      const valid = validateOutgoing(topic.subject, topic.request, payload);
      let replies: Uint8Array[];
      try {
        replies = await transport.gather(topic.subject, encodeFor(topic.subject, valid), window);
      } catch (error) {
        if (error instanceof TransportError) throw closed(topic.subject);
        throw error;
      }
      const gathered: Gathered<R> = { replies: [], refused: [] };
      for (const data of replies) {
        const reply = decodeReply(topic, data);
        if (reply.ok) gathered.replies.push(reply.value);
        else gathered.refused.push(reply.error);
      }
      return gathered;
    },

    serve(topic, handler, options = {}) {
      return transport.subscribe(
        topic.subject,
        (message) => {
          const respond = (envelope: z.infer<typeof ReplyEnvelopeSchema>): void => {
            if (!message.respond) return;
            let bytes = encode(envelope);
            if (bytes.byteLength > transport.maxPayload) {
              log.error({ subject: message.subject, bytes: bytes.byteLength }, 'refused to send a reply over the bus payload limit');
              bytes = encode({
                ok: false,
                error: {
                  code: 'E-BUS-001',
                  message: `the reply on '${message.subject}' is ${bytes.byteLength} bytes, over the bus's ${transport.maxPayload}-byte limit`,
                },
              });
            }
            try {
              message.respond(bytes);
            } catch (error) {
              log.warn({ subject: message.subject, err: error }, 'could not send a reply');
            }
          };
          const received = receive(message, topic.request);
          if (!received.ok) {
            respond({ ok: false, error: { code: 'E-BUS-002', message: `refused the request on '${message.subject}': ${received.reason}` } });
            return;
          }
          void (async () => {
            try {
              const result = await handler(received.value, { subject: message.subject });
              const reply = topic.reply.safeParse(result);
              if (!reply.success) {
                const reason = `reply does not match its contract: ${describeIssues(reply.error)}`;
                log.error({ subject: message.subject, reason }, 'refused to send an invalid bus reply');
                respond({ ok: false, error: { code: 'E-BUS-001', message: `refused to reply on '${message.subject}': ${reason}` } });
                return;
              }
              respond({ ok: true, data: reply.data });
            } catch (error) {
              if (!(error instanceof MurmurError)) log.error({ subject: message.subject, err: error }, 'bus request handler failed');
              respond({ ok: false, error: toErrorJson(error) });
            }
          })();
        },
        options.queue,
      );
    },

    async keyValue(bucket) {
      assertBucketName(bucket);
      const store = await guarded('key-value', bucket, () => transport.keyValue(bucket));
      return checkedKeyValueStore(mappedKeyValue(store), transport.maxPayload);
    },

    async objectStore(bucket) {
      assertBucketName(bucket);
      const store = await guarded('object', bucket, () => transport.objectStore(bucket));
      return checkedObjectStore(mappedObjects(store));
    },

    onConnectionChange: (listener) => transport.onConnectionChange(listener),
    get connected() {
      return transport.connected;
    },

    flush: () => transport.flush(),
    close: () => transport.close(),
  };
}
