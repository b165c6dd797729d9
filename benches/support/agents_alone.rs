//! The agents without the runner, the baselines `bench run` measures the runner against:
//! started by hand ([`Agents::alone`]), with Claude Code's own sandbox on
//! ([`with_own_sandbox`]), and alone inside the namespace the runner would give them
//! ([`in_the_jobs_namespace`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use quest_runner::agent;
use quest_runner::job::Trust;
use quest_runner::sandbox::{self, Platform, PolicyInputs};
use quest_runner::workspace::WorkspacePaths;
use quest_runner_selftest::model_server::ModelServer;

/// The agents as a person starts them by hand, pointed at the scripted model.
pub struct Agents<'a> {
    pub claude: &'a Path,
    pub opencode: &'a Path,
    pub provider: &'a serde_json::Value,
    pub server: &'a ModelServer,
}

impl Agents<'_> {
    /// `agent` alone in `home`, its config and temp dir there.
    pub fn alone(&self, agent: &str, home: &Path) -> Command {
        let mut direct = match agent {
            "claude" => {
                let mut c = Command::new(self.claude);
                c.args(["-p", "say done", "--permission-mode", "dontAsk"])
                    .env("ANTHROPIC_BASE_URL", self.server.base_url())
                    .env("ANTHROPIC_API_KEY", "sk-bench")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
                c
            }
            _ => {
                let cfg = home.join(".config/opencode");
                std::fs::create_dir_all(&cfg).expect("cfg");
                let mut oc = self.provider.clone();
                oc["model"] = serde_json::json!("scripted/scripted");
                oc["provider"]["scripted"]["options"]["apiKey"] = serde_json::json!("sk-bench");
                std::fs::write(cfg.join("opencode.json"), oc.to_string()).expect("oc cfg");
                let mut c = Command::new(self.opencode);
                c.args(["run", "say done"])
                    .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                    .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
                c
            }
        };
        direct
            .current_dir(home)
            .env("HOME", home)
            .env("TMPDIR", home);
        direct
    }
}

/// `claude` (started by hand in `home`) with its own sandbox on and Bash allowed, as a
/// person would run it without the runner.
pub fn with_own_sandbox(mut claude: Command, home: &Path) -> Command {
    let settings = home.join("sandbox-settings.json");
    let body = serde_json::json!({
        "permissions": {"defaultMode": "dontAsk", "allow": ["Bash"]},
        "sandbox": {
            "enabled": true,
            "failIfUnavailable": true,
            "allowUnsandboxedCommands": false,
            "autoAllowBashIfSandboxed": true,
        },
    });
    std::fs::write(&settings, body.to_string()).expect("claude settings");
    claude.arg("--settings").arg(&settings);
    claude
}

/// `direct` (an agent started on its own in `home`) as the runner starts an agent: inside the
/// job's namespace, rendered from a policy whose checkout and temp dir are `home`, handed to
/// the agent's identity first when this is root.
pub fn in_the_jobs_namespace(direct: &Command, home: &Path) -> Command {
    let job_dir = home.join(".job");
    std::fs::create_dir_all(&job_dir).expect("job dir");
    let ws = WorkspacePaths {
        checkout: home.to_path_buf(),
        bare_clone: job_dir.join("bare.git"),
        git_store: job_dir.join("git"),
        worktree_admin: job_dir.join("git/worktrees/checkout"),
        temp_dir: home.to_path_buf(),
        job_dir: job_dir.clone(),
        helper_tmp: job_dir.join("helper"),
        devshell_script: None,
    };
    let policy = sandbox::plan(
        &ws,
        &PolicyInputs {
            platform: Platform::Linux,
            trust: Trust::Trusted,
            extra_hosts: vec![],
            full_access_hosts: vec![],
            dependency_hosts: Vec::new(),
            state_dir: job_dir.join("state"),
            operator_home: None,
            private: vec![],
        },
    );
    let mut launch = agent::Launch {
        program: PathBuf::from(direct.get_program()),
        args: direct
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env: Default::default(),
        cwd: home.to_path_buf(),
        stdin: String::new(),
        files: vec![],
        transcript: job_dir.join("transcript"),
        companion: None,
        own: agent::OwnFiles::default(),
        confined: None,
        net_bridge: None,
    };
    // On the host's network, as the agent alone is: the namespace's file system is what is
    // timed (the bridges, a `--unshare-net` and two loopback hops, show in "via runner").
    quest_runner::run::confine::confine(&mut launch, &policy, &ws, (home, None))
        .expect("namespace");
    let confined = launch.confined.expect("confined on Linux");
    let mut cmd = Command::new(&confined.program);
    cmd.args(confined.args(&launch.program, &launch.args))
        .current_dir(home);
    for (k, v) in direct.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}
