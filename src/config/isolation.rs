//! `isolation` in the config: which kernel answers each trust level's commands
//! ([`crate::sandbox::gvisor`]). A level set to `gvisor` where runsc cannot run refuses its
//! jobs with the reason: it never falls back to the host's kernel.

use serde::{Deserialize, Serialize};

use crate::job::Trust;
use crate::sandbox::gvisor::Isolation;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IsolationConfig {
    /// `namespace` or `gvisor` [default: namespace].
    pub untrusted: Isolation,
    /// `namespace` or `gvisor` [default: namespace].
    pub trusted: Isolation,
}

impl IsolationConfig {
    pub fn for_trust(&self, trust: Trust) -> Isolation {
        match trust {
            Trust::Trusted => self.trusted,
            Trust::Untrusted => self.untrusted,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == IsolationConfig::default()
    }

    /// Whether any level runs on gVisor.
    pub fn uses_gvisor(&self) -> bool {
        self.trusted == Isolation::Gvisor || self.untrusted == Isolation::Gvisor
    }
}
