/**
 * The signals that stop a command's work (`mur run`, `mur stage`, `mur eval run`): an interrupt
 * and a termination. Not SIGHUP: listening for it would undo `nohup`'s ignoring it, and a command
 * whose terminal is gone fails its first write to it.
 */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const;
