import * as z from 'zod';

/**
 * `mur` parses a handful of payloads a run, so zod's compiled parsers cost it more than they save:
 * an object schema's parser is compiled (`new Function`) the first time it parses, ~9 ms of a run,
 * and keeping them compiled in the startup snapshot instead cost ~3 MB of a run's peak RSS. With
 * `jitless` every schema parses through zod's interpreter, which the thin client's snapshot keeps
 * warm (`snapshot-client.ts`): no slower end to end and ~3 MB less peak RSS.
 *
 * zod reads the setting when an object schema is made, so this module is the first import of
 * `mur`'s entries (`main.ts`, `snapshot.ts`, `snapshot-client.ts`), evaluated before any
 * contract's schema. The services keep compiled parsers: a door parses thousands of messages.
 */
z.config({ jitless: true });
