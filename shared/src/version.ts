/** The runtime's own version: what `MURMUR.md` names and every service's spans carry as `service.version`. */
export const RUNTIME_VERSION = '0.1.0';
