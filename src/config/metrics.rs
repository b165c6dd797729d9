//! Where `serve` answers an operator's Prometheus and health checks (`metrics` in the
//! config). Off unless set, and on a loopback address unless the operator says otherwise:
//! the counters name agents, outcomes and limits, which is nothing for the network to read
//! by default.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::field::FieldError;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// The address of `/metrics`, `/healthz` and `/readyz`, e.g. `127.0.0.1:9477`; none
    /// when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Listen on a non-loopback address too (off: such an address is refused).
    pub public: bool,
}

impl MetricsConfig {
    pub fn is_default(&self) -> bool {
        *self == MetricsConfig::default()
    }

    /// Refuses an address others can reach unless `public` says so.
    pub fn check(&self) -> Result<(), FieldError> {
        match self.listen {
            Some(addr) if !addr.ip().is_loopback() && !self.public => Err(FieldError::new(
                "metrics.listen",
                format!(
                    "{addr} is not a loopback address; set \"metrics.public\": true to listen \
                     where other hosts can connect"
                ),
            )),
            _ => Ok(()),
        }
    }
}
