import { MurmurError, type StagedPlan } from '@murmur/shared';

/** Room left in a reply for the envelope around the plan. */
const REPLY_ENVELOPE_BYTES = 4_096;

/**
 * A plan too large for the reply that carries it, refused by what makes it so: its manifest (the
 * plan holds the manifest's text and the manifest parsed), named by its largest parts. Sent, the
 * bus refused the reply itself and the launcher read only that a reply on 'stage' was over its
 * limit, with no field to shorten.
 */
export function refuseOversizedPlan(plan: StagedPlan, maxPayload: number): void {
  const bytes = Buffer.byteLength(JSON.stringify(plan));
  // The bound the plan is held to, and said: the reply's, less its envelope.
  const most = maxPayload - REPLY_ENVELOPE_BYTES;
  if (bytes <= most) return;
  const largest = largestParts(plan.capsule.manifest).slice(0, 3);
  throw new MurmurError(
    'E-MAN-003',
    `the manifest of ${plan.capsule.name}@${plan.capsule.version} is too large to stage: the plan it makes is ${bytes} bytes, over the ${most} a reply on the bus may carry of a plan${largest.length > 0 ? `; its largest parts: ${largest.map(([where, size]) => `${where} (${size} bytes)`).join(', ')}` : ''}`,
    {
      ...(largest[0] ? { path: largest[0][0] } : {}),
      hint: "shorten what it names: a manifest says what a capsule is and may do in a few kilobytes; long text belongs in the capsule's files",
    },
  );
}

/** Each field of `value` (objects followed three deep) with the bytes it takes as JSON, largest first. */
function largestParts(value: unknown): Array<[string, number]> {
  const parts: Array<[string, number]> = [];
  const visit = (node: unknown, where: string, depth: number): void => {
    if (node !== null && typeof node === 'object' && !Array.isArray(node) && depth < 3) {
      for (const [key, child] of Object.entries(node)) visit(child, where ? `${where}.${key}` : key, depth + 1);
      return;
    }
    if (where) parts.push([where, Buffer.byteLength(JSON.stringify(node) ?? '')]);
  };
  visit(value, '', 0);
  return parts.sort((left, right) => right[1] - left[1]);
}
