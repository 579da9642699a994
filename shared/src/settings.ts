import { MurmurError } from './errors.js';

/**
 * Numbers the runtime reads from its environment (`MURMUR_*_MS`, `_SECS`, `_BYTES`, the pool's
 * size). Unset or blank is the default; anything else must be the number it names. A value that
 * is not — `8s`, `64k`, `two`, `-1` — is refused with `E-CFG-003` naming the variable, rather than
 * read as the default: an operator who set a limit and got another one would never know.
 */

export interface NumberSetting {
  /** What the number counts, for the message: `milliseconds`, `seconds`, `bytes`, `hosts`. */
  unit: string;
  /** Whether a fraction is allowed (seconds may be 0.5); whole numbers only otherwise. */
  fractional?: boolean;
  /** Whether 0 is allowed (a pool of none); otherwise the number must be above 0. */
  zero?: boolean;
  /** The most it may be, and why (`the executor's 64 MiB backlog to a host`). */
  most?: { value: number; because: string };
}

/** The longest delay a node timer holds: past it, it fires at once (with only a warning). */
export const LONGEST_TIMER_MS = 2 ** 31 - 1;

/** A duration a node timer can hold, by unit. */
const LONGEST_TIMER: Readonly<Record<string, number>> = { milliseconds: LONGEST_TIMER_MS, seconds: Math.floor(LONGEST_TIMER_MS / 1000) };

type Environment = Readonly<Record<string, string | undefined>>;

function describe(setting: NumberSetting): string {
  return `${setting.fractional ? 'a number' : 'a whole number'} of ${setting.unit}${setting.zero ? '' : ' above 0'}`;
}

/** The number `name` gives in `env`; `fallback` when it is unset or blank; refused (`E-CFG-003`) when it is anything else. */
export function numberSetting(env: Environment, name: string, fallback: number, setting: NumberSetting): number;
export function numberSetting(env: Environment, name: string, fallback: undefined, setting: NumberSetting): number | undefined;
export function numberSetting(env: Environment, name: string, fallback: number | undefined, setting: NumberSetting): number | undefined {
  const raw = env[name]?.trim();
  if (!raw) return fallback;
  const value = Number(raw);
  const wellFormed = setting.fractional ? /^\d+(\.\d+)?$/.test(raw) : /^\d+$/.test(raw);
  if (wellFormed && Number.isFinite(value) && (setting.fractional || Number.isSafeInteger(value)) && (value > 0 || (setting.zero && value === 0))) {
    const bound = boundOf(setting);
    if (bound && value > bound.value)
      throw new MurmurError('E-CFG-003', `invalid ${name}: '${raw}' ${setting.unit} ${bound.exceeded}`, {
        path: name,
        hint: `give at most ${bound.value} ${setting.unit}${orUnset(fallback)}`,
      });
    return value;
  }
  // Written as a number, but past what is counted exactly (or so long that it is no number at all
  // to JavaScript, Infinity): said as too large, not as no number.
  if (wellFormed && value > Number.MAX_SAFE_INTEGER) {
    const bound = boundOf(setting) ?? { value: Number.MAX_SAFE_INTEGER, exceeded: `is more than can be counted exactly (at most ${Number.MAX_SAFE_INTEGER})` };
    throw new MurmurError('E-CFG-003', `invalid ${name}: '${raw}' ${setting.unit} ${bound.exceeded}`, {
      path: name,
      hint: `give at most ${bound.value} ${setting.unit}${orUnset(fallback)}`,
    });
  }
  throw new MurmurError('E-CFG-003', `invalid ${name}: '${raw}' is not ${describe(setting)}`, {
    path: name,
    hint: `give ${describe(setting)}${orUnset(fallback)}`,
  });
}

/** The most a setting may be, and what a value past it is: the tighter of its own bound and, for a duration, a timer's. */
function boundOf(setting: NumberSetting): { value: number; exceeded: string } | undefined {
  const own = setting.most && { value: setting.most.value, exceeded: `is more than ${setting.most.because} allows (at most ${setting.most.value})` };
  const longest = LONGEST_TIMER[setting.unit];
  const timer = longest === undefined ? undefined : { value: longest, exceeded: `is longer than a timer can hold (at most ${longest}, about 24 days)` };
  return own && timer ? (own.value <= timer.value ? own : timer) : (own ?? timer);
}

function orUnset(fallback: number | undefined): string {
  return fallback === undefined ? ', or leave it unset' : `, or leave it unset for ${fallback}`;
}
