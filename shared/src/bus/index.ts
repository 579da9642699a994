export { type Bus, type MessageInfo, type RequestOptions, type SubscribeOptions, type Subscription, DEFAULT_REQUEST_TIMEOUT_MS, createBus } from './bus.js';
export { InProcessTransport } from './in-process.js';
export { NatsTransport, type NatsTransportOptions } from './nats.js';
export { isPublishableSubject, isValidPattern, subjectMatches } from './subject.js';
export { type CommandTopic, type EventTopic, defineCommand, defineEvent } from './topic.js';
export { type RawMessage, type RawSubscription, type Transport, TransportError } from './transport.js';
export { connectBus, type ConnectBusOptions } from './connect.js';
