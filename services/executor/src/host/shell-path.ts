/**
 * Where an allowlisted shell binary is found: the subprocess PATH the runtime gives (its default
 * when it gives none), then the system's sbin and bin directories. One list, for the sandbox's
 * execute grants (`resolveShellBinaries`) and for the host's lookup when the guest runs the
 * binary (`runShell`), so the file granted is the file run; a PATH the guest sets is its
 * command's environment, never where the binary is looked up.
 */
export function shellSearchPath(subprocessPath: string | undefined): string {
  return `${subprocessPath ?? DEFAULT_SUBPROCESS_PATH}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;
}

/** The subprocess PATH when the launcher gives none. */
export const DEFAULT_SUBPROCESS_PATH = '/usr/local/bin:/usr/bin:/bin';
