"""Cloud targets (omnidraft.serve): the verification server, its gate, and the device-side
``RemoteTarget``."""
