//! The tunnel's wire: what the agent and the server say to each other at `/v3/connect`, the
//! one place both read it from. The agent dials out, authenticates with a registration token
//! or its cluster credential, and upgrades the HTTPS connection to [`PROTOCOL`]; over the
//! upgraded connection the server speaks HTTP/2 as the client and the agent as the server.

/// The `Upgrade` protocol of the tunnel.
pub const PROTOCOL: &str = "lariat-tunnel/1";
/// The upgrade response header carrying the credential the server issued a registering agent.
pub const CREDENTIAL_HEADER: &str = "x-lariat-agent-credential";
/// The upgrade response header naming the Cluster the agent serves (`namespace/name`).
pub const CLUSTER_HEADER: &str = "x-lariat-cluster";
/// The agent's version, sent with the handshake: the server holds it to its support matrix.
pub const AGENT_VERSION_HEADER: &str = "x-lariat-agent-version";
/// The first segment of the agent's own endpoints on the tunnel: a proxied request there is
/// the Cluster's `handoff` subresource, not its API.
pub const AGENT_PATH_SEGMENT: &str = "lariat-agent/";
/// The agent's handoff endpoint: `lariat move` tells the agent its new server there.
pub const HANDOFF_PATH: &str = "/lariat-agent/v1/handoff";
