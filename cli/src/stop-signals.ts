/**
 * The signals that stop a command's work (`mur run`, `mur stage`, `mur eval run`): an interrupt, a
 * termination, and a hangup (the terminal closed, an SSH session dropped). Node starts every
 * program with SIGHUP at its default, `nohup`'s ignoring it undone, so left unheard it ended `mur`
 * at once: the session never ended, its trace had no `session_end`, and its cgroups, the warm
 * host's and the staging's scratch copy stayed behind. Heard, it stops the session as the others
 * do. A run meant to outlive its terminal is started in a session of its own (`setsid mur run`).
 */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
