// keybroker's version, as `status` and the health endpoint report it.
export const VERSION = "0.1.0";
