/**
 * The lifecycle calls an unbound hook gets from a session of one task whose model asks for one
 * shell tool call and then answers: upstream's order, whichever inference runs the turns.
 */
export const ONE_SHELL_CALL_SESSION = [
  'on-session-start',
  'on-task-start',
  'on-inference',
  'on-tool-call',
  'on-shell',
  'on-inference',
  'on-task-end',
  'on-session-end',
] as const;
