//! The scripted model's script for the job: the permitted commands first, then every
//! attempt's steps, then the closing commit; and where in it each verdict finds its output.

use super::harness::Harness;
use super::SuiteConfig;
use crate::boundary::attempts::{self, Attempt, Targets};
use crate::model_server::Step;
use quest_runner::job::Trust;

/// The attempts of a run and the script steps whose tool results judge them.
pub(super) struct Plan {
    pub(super) attempts: Vec<Attempt>,
    /// Each attempt's last step in the script, by the attempt's index.
    pub(super) last_step: Vec<usize>,
    /// The package managers' reads' step, when the company machine runs them.
    pub(super) pm_step: Option<usize>,
}

impl Plan {
    /// The plan and the script it indexes (pure: the caller hands the script to the model).
    pub(super) fn new(
        cfg: &SuiteConfig,
        harness: &Harness,
        targets: &Targets,
    ) -> (Plan, Vec<Step>) {
        let fixture = &harness.fixture;
        let mut attempts = attempts::all(fixture, targets);
        if let Some(m) = cfg.mutation {
            // A mutation run needs only the attempts its weakened rule must free (the base run
            // has shown the others refused); this keeps the mutation runs per agent short.
            attempts.retain(|a| m.caught_by().contains(&a.id));
        }
        let mut script = vec![attempts::permitted(targets)];
        if cfg.trust == Trust::Trusted {
            script.push(attempts::permitted_network());
        }
        if let Some(r) = &harness.registry {
            script.push(attempts::permitted_registry_reads(r.port, &fixture.token));
        }
        let pm_step = harness.internal_registry.as_ref().map(|c| {
            script.push(attempts::permitted_package_manager_reads(
                c.front.port,
                &c.npmrc,
                &fixture.token,
            ));
            script.len() - 1
        });
        let mut last_step = Vec::new();
        for a in &attempts {
            script.extend(a.steps.iter().cloned());
            last_step.push(script.len() - 1);
        }
        script.extend(attempts::closing());
        let plan = Plan {
            attempts,
            last_step,
            pm_step,
        };
        (plan, script)
    }
}
