import { readFileSync } from 'node:fs';
import { type BuiltGuest, type JsGuest, componentFromJs } from '@murmur/guest-kit';

/**
 * Two multipurpose JavaScript guests that a test drives with a JSON list of actions, so one
 * component covers many behaviours (sandbox escapes, denied fetches, tool calls, limits):
 *
 * - the probe capsule (`probe/probe-capsule.js`): exports `murmur:capsule/run@0.1.0`, imports
 *   every host interface a capsule may use. Actions come from `$PROBE_ACTIONS` or `task.md` in its
 *   preopen; it prints one JSON line per action and writes them all to `out/probe.json`.
 * - the probe tool (`probe/probe-tool.js`): exports `murmur:tool/run@0.1.0`; actions come from
 *   `input.data` (`{"actions": […]}`), results go back as the tool result's `data`.
 *
 * Both share `probe/probe-common.js`, prepended to each source (componentize-js resolves no
 * relative imports). The actions and their results are described in the sources.
 */

function probeFile(name: string): string {
  return readFileSync(new URL(`./probe/${name}`, import.meta.url), 'utf8');
}

const common = probeFile('probe-common.js');

export const PROBE_CAPSULE: JsGuest = {
  source: `${common}\n${probeFile('probe-capsule.js')}`,
  world: probeFile('probe-capsule.wit'),
  worldName: 'capsule',
};

export const PROBE_TOOL: JsGuest = {
  source: `${common}\n${probeFile('probe-tool.js')}`,
  world: probeFile('probe-tool.wit'),
  worldName: 'tool',
};

export function probeCapsule(): Promise<BuiltGuest> {
  return componentFromJs(PROBE_CAPSULE);
}

export function probeTool(): Promise<BuiltGuest> {
  return componentFromJs(PROBE_TOOL);
}

/**
 * The recording hook (`hook/recording-hook.js`, with probe-common.js before it): records every
 * lifecycle call in `events.jsonl` in its preopen and answers as `script.json` there says.
 */
export const RECORDING_HOOK: JsGuest = {
  source: `${common}\n${readFileSync(new URL('./hook/recording-hook.js', import.meta.url), 'utf8')}`,
  world: readFileSync(new URL('./hook/recording-hook.wit', import.meta.url), 'utf8'),
  worldName: 'hook',
};

export function recordingHook(): Promise<BuiltGuest> {
  return componentFromJs(RECORDING_HOOK);
}
