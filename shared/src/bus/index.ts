export {
  type Bus,
  type Gathered,
  type MessageInfo,
  type RequestOptions,
  type SubscribeOptions,
  type Subscription,
  DEFAULT_REQUEST_TIMEOUT_MS,
  PayloadTooLarge,
  createBus,
  refuseInvalidPattern,
} from './bus.js';
export { busRoundTrip } from './round-trip.js';
export { InProcessTransport } from './in-process.js';
export { type KeyValueEntry, type KeyValueStore, isValidBucketName, isValidKeyValueKey } from './kv.js';
export { type ObjectInfo, type ObjectSource, type ObjectStore, isValidObjectName } from './objects.js';
// The NATS transport is its own entry point, `@murmur/shared/bus/nats`: importing the bus must not
// load the NATS client for a process that runs on the in-process bus.
export { isPublishableSubject, isValidPattern, patternWithin, subjectMatches } from './subject.js';
export { type CommandTopic, type EventTopic, defineCommand, defineEvent } from './topic.js';
export { type BusConnectionState, type GatherWindow, type RawMessage, type RawSubscription, type Transport, TransportError } from './transport.js';
export { connectBus, type ConnectBusOptions } from './connect.js';
export { type NatsEndpoint, natsEndpoint, shownNatsUrl } from './nats-url.js';
