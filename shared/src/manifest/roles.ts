/** The roles an artifact plays (SPEC §1.1), in upstream's order: what `runtime:` may say. */
export const ARTIFACT_ROLES = ['tool', 'driver', 'hook', 'skill'] as const;
