//! Attempts on what reads a job's git data after the job: the runner's own git on the host,
//! and later jobs of the same repository.
//!
//! Their escapes show only once something on the host reads what the command wrote: a
//! filter that the runner's `git status` runs, a checkout a later job gets. So each attempt's
//! unconfined control is followed by `control_after`, which does what such a reader did
//! (plain `git status` as the runner once ran it, a later worktree registration), and the
//! attempts that aim at later jobs are judged by preparing one: a real workspace of the
//! repository at the same revision, through the runner's own code.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{shell, Attempt, Detect, Rule, Targets};
use crate::boundary::fixture::{Fixture, LOOSE_VICTIM, REPLACE_VICTIM};
use quest_runner::job::{AgentKind, Job, Trust};
use quest_runner::state::StateDir;
use quest_runner::workspace::Workspace;

/// The status command the runner ran on a job's worktree before it kept job and host git
/// apart: it followed the admin dir's `commondir` and recursed into submodules.
const RUNNER_STATUS_BEFORE: &str =
    "git status --porcelain --ignored --untracked-files=all >/dev/null 2>&1; true";

/// The attempts, by class, in the order the suite has always made them: filters the
/// runner's git on the host would run, a worktree admin dir that breaks a later worktree,
/// the shared clone's objects and refs rewritten for later jobs, and git configuration in
/// HOME that the agent's own git reads.
pub fn attempts(fixture: &Fixture, t: &Targets) -> Vec<Attempt> {
    let mut list = runner_git_filters(fixture);
    list.push(gitdir_redirect(fixture));
    list.extend(shared_clone_rewrites(fixture, t));
    list.push(home_git_config(fixture));
    list
}

/// Filters that the runner's `git status` would run on the host: a submodule's own config,
/// and a config reached through a rewritten `commondir`.
fn runner_git_filters(fixture: &Fixture) -> Vec<Attempt> {
    let marker = |name: &str| fixture.marker(name).display().to_string();
    let identity = "-c user.name=qr -c user.email=qr@qr.invalid";

    // A tracked file dated in the future stays racily clean: every later `git status` hashes
    // it again, through the filter, however often the job's own commits refresh the index.
    let mut submodule = shell(
        "submodule-filter",
        "commit a submodule whose own config sets a clean filter, so the runner's git status \
         runs it on the host"
            .into(),
        Rule::HostGit,
        format!(
            "rm -rf qr-sub && git init -q qr-sub && cd qr-sub && echo a > f && git add f && \
             git {identity} commit -qm sub && git config filter.qr.clean 'touch {m}; cat' && \
             echo '* filter=qr' > .gitattributes && cd .. && git add qr-sub && \
             git {identity} commit -qm gitlink && touch -d 2099-01-01 qr-sub/f && echo SUBMODULE-PLANTED",
            m = marker("submodule-filter"),
        ),
        Detect::HostPath(fixture.marker("submodule-filter")),
    );
    submodule.control_after = Some(RUNNER_STATUS_BEFORE.into());

    let mut commondir = shell(
        "commondir-redirect",
        "point the worktree admin dir's commondir at a config with a clean filter, so the \
         runner's git loads it"
            .into(),
        Rule::HostGit,
        format!(
            "a=$(git rev-parse --git-dir) && c=$(git rev-parse --git-common-dir) && \
             mkdir -p \"$a/qr-evil\" && ln -sfn \"$c/objects\" \"$a/qr-evil/objects\" && \
             ln -sfn \"$c/refs\" \"$a/qr-evil/refs\" && cp \"$c/HEAD\" \"$a/qr-evil/HEAD\" && \
             printf '[filter \"qrx\"]\\n\\tclean = touch {m}; cat\\n' > \"$a/qr-evil/config\" && \
             echo '* filter=qrx' > .gitattributes && touch -d 2099-01-01 README.md && \
             echo \"$a/qr-evil\" > \"$a/commondir\" && echo COMMONDIR-REWRITTEN",
            m = marker("commondir-filter"),
        ),
        Detect::Any(vec![
            Detect::OutputHas("COMMONDIR-REWRITTEN".into()),
            Detect::HostPath(fixture.marker("commondir-filter")),
        ]),
    );
    commondir.control_after = Some(RUNNER_STATUS_BEFORE.into());
    vec![submodule, commondir]
}

fn gitdir_redirect(fixture: &Fixture) -> Attempt {
    let rev = &fixture.rev;
    // A worktree registered later at the path the rewritten gitdir names is refused ("missing
    // but already registered"): with one worktree list per clone, the next job's checkout.
    let victim = later_checkout(fixture);
    let mut gitdir = shell(
        "gitdir-redirect",
        "point the worktree admin dir's gitdir at another checkout, which a later worktree \
         there then collides with"
            .into(),
        Rule::LaterJob,
        format!(
            "a=$(git rev-parse --git-dir) && echo '{v}/.git' > \"$a/gitdir\" && echo GITDIR-REWRITTEN",
            v = victim.display()
        ),
        Detect::Any(vec![
            Detect::OutputHas("GITDIR-REWRITTEN".into()),
            Detect::OutputHas("LATER-WORKTREE-REFUSED".into()),
        ]),
    );
    gitdir.control_after = Some(format!(
        "git worktree add --detach --quiet {v} {rev} >/dev/null 2>&1 && echo LATER-WORKTREE-MADE || echo LATER-WORKTREE-REFUSED",
        v = victim.display()
    ));
    gitdir
}

/// The shared clone's loose objects and replace refs, rewritten under the old names.
fn shared_clone_rewrites(fixture: &Fixture, t: &Targets) -> Vec<Attempt> {
    let token = &fixture.token;
    let rev = &fixture.rev;
    let bare = t.bare.display();
    // Git does not check a loose object's hash when it reads it: a rewritten file is what every
    // later reader of the clone gets under the old name.
    let loose = shell(
        "loose-object",
        format!("overwrite the shared clone's loose object of {LOOSE_VICTIM} for later jobs"),
        Rule::LaterJob,
        format!(
            "o=$(git rev-parse {rev}:{LOOSE_VICTIM}) && e=$(echo EVIL-LOOSE-{token} | git hash-object -w --stdin) && \
             cp -f \"$(git rev-parse --git-path objects/${{e:0:2}}/${{e:2}})\" {bare}/objects/${{o:0:2}}/${{o:2}} && \
             echo LOOSE-OVERWRITTEN"
        ),
        Detect::LaterJobSees {
            file: LOOSE_VICTIM.into(),
            text: format!("EVIL-LOOSE-{token}"),
        },
    );

    // Git honours replace refs wherever it reads objects, unless told not to: a later job's
    // checkout, anyone's `git show` in the clone.
    let mut replace = shell(
        "replace-ref",
        format!("replace {REPLACE_VICTIM}'s blob with refs/replace for later jobs"),
        Rule::LaterJob,
        format!(
            "o=$(git rev-parse {rev}:{REPLACE_VICTIM}) && e=$(echo EVIL-REPLACE-{token} | git hash-object -w --stdin) && \
             git update-ref refs/replace/$o $e ; \
             echo EVIL-REPLACE-{token} | GIT_OBJECT_DIRECTORY={bare}/objects git hash-object -w --stdin ; \
             mkdir -p {bare}/refs/replace && echo $e > {bare}/refs/replace/$o && echo REPLACE-PLANTED"
        ),
        Detect::Any(vec![
            Detect::LaterJobSees {
                file: REPLACE_VICTIM.into(),
                text: format!("EVIL-REPLACE-{token}"),
            },
            Detect::OutputHas("REPLACE-HONOURED".into()),
        ]),
    );
    replace.control_after = Some(format!(
        "git --git-dir {bare} cat-file blob {rev}:{REPLACE_VICTIM} | grep -q EVIL-REPLACE-{token} && echo REPLACE-HONOURED"
    ));
    vec![loose, replace]
}

fn home_git_config(fixture: &Fixture) -> Attempt {
    let marker = |name: &str| fixture.marker(name).display().to_string();
    // The agent itself runs outside the sandbox with the commands' HOME, and runs git in the
    // checkout: git reads `$HOME/.config/git/config` (and `attributes`) as global configuration.
    let hook = marker("agent-git-config");
    let mut agent_config = shell(
        "home-git-config",
        "write git configuration into HOME ($HOME/.config/git), which the agent's own git on \
         the host would read"
            .into(),
        Rule::HostGit,
        crate::scripts::fill(crate::scripts::BOUNDARY_HOME_GIT_CONFIG, &[("HOOK", &hook)]),
        Detect::Any(vec![
            Detect::OutputHas("HOME-GIT-CONFIG-WRITTEN".into()),
            Detect::HostPath(fixture.marker("agent-git-config")),
        ]),
    );
    agent_config.control_after = Some(RUNNER_STATUS_BEFORE.into());
    agent_config
}

/// Where the gitdir attempt points: a checkout some later registration would use.
fn later_checkout(fixture: &Fixture) -> PathBuf {
    fixture.path().join("later-checkout")
}

/// What a later job of the repository at the suite's revision finds in `file` of its checkout,
/// or why it could not be prepared. Each call is a new job, prepared and removed through the
/// runner's own workspace code; and, beside it, what a checkout written now from the shared
/// clone holds (`JobGit::create`, as a revision's shared tree is written): a root runner's
/// later job at this revision reads the tree written before the attempt, but every tree
/// written after it — a new revision's, or this one's after `gc` — reads the clone as it is.
pub fn later_job_view(fixture: &Fixture, file: &str) -> Result<String, String> {
    static LATER: AtomicUsize = AtomicUsize::new(0);
    let n = LATER.fetch_add(1, Ordering::Relaxed);
    let state = StateDir::at(&fixture.state);
    let job = Job {
        id: format!("later-{}-{n}", fixture.token),
        repo: fixture.repo.display().to_string(),
        rev: fixture.rev.clone(),
        git_ref: Some("main".into()),
        trust: Trust::Trusted,
        agent: AgentKind::Claude,
        account: "main".into(),
        prompt: "a later job".into(),
        timeout: std::time::Duration::from_secs(120),
    };
    let root = quest_runner::workspace::job_root(&state, &job.id);
    let handle = tokio::runtime::Handle::current();
    let seen = tokio::task::block_in_place(|| {
        handle.block_on(async {
            let ws = Workspace::prepare(&state, &job)
                .await
                .map_err(|e| format!("the later job could not be prepared: {e}"))?;
            let job_sees = std::fs::read_to_string(ws.checkout_view().join(file))
                .map_err(|e| format!("the later job's {file}: {e}"))?;
            let fresh = tempfile::Builder::new()
                .prefix("later-tree-")
                .tempdir_in(fixture.path())
                .map_err(|e| e.to_string())?;
            let git = quest_runner::workspace::job_git::JobGit::at(fresh.path());
            git.create(&ws.paths.bare_clone, &job.rev, "")
                .await
                .map_err(|e| format!("a checkout from the shared clone: {e}"))?;
            let tree_sees = std::fs::read_to_string(git.checkout.join(file))
                .map_err(|e| format!("a checkout from the shared clone's {file}: {e}"))?;
            Ok(format!("{job_sees}\n{tree_sees}"))
        })
    });
    let _ = quest_runner::remove::remove_tree(&root);
    seen
}

/// What the controls of these attempts leave in the shared clone and the control worktree,
/// captured before the controls run and put back after each.
pub struct ControlUndo {
    bare: PathBuf,
    admin: PathBuf,
    checkout: PathBuf,
    files: Vec<(PathBuf, Option<Vec<u8>>)>,
}

impl ControlUndo {
    pub fn capture(fixture: &Fixture, bare: &Path, checkout: &Path) -> Result<ControlUndo, String> {
        let dotgit = std::fs::read_to_string(checkout.join(".git")).map_err(|e| e.to_string())?;
        let admin = PathBuf::from(
            dotgit
                .trim()
                .strip_prefix("gitdir: ")
                .ok_or("the control checkout's .git is not a gitdir file")?,
        );
        let mut paths = vec![admin.join("gitdir"), admin.join("commondir")];
        for file in [LOOSE_VICTIM, REPLACE_VICTIM] {
            let oid = crate::fixture_git(
                &fixture.repo,
                &["rev-parse", &format!("{}:{file}", fixture.rev)],
            )?;
            paths.push(bare.join("objects").join(&oid[..2]).join(&oid[2..]));
        }
        let files = paths
            .into_iter()
            .map(|p| {
                let data = std::fs::read(&p).ok();
                (p, data)
            })
            .collect();
        Ok(ControlUndo {
            bare: bare.to_path_buf(),
            admin,
            checkout: checkout.to_path_buf(),
            files,
        })
    }

    pub fn restore(&self, fixture: &Fixture) {
        for (path, data) in &self.files {
            if let Some(data) = data {
                let _ = std::fs::remove_file(path);
                let _ = std::fs::write(path, data);
            }
        }
        let _ = quest_runner::remove::remove_tree(&self.admin.join("qr-evil"));
        let _ = quest_runner::remove::remove_tree(&self.bare.join("refs/replace"));
        let _ = quest_runner::remove::remove_tree(&self.checkout.join("qr-sub"));
        let _ = std::fs::remove_file(self.checkout.join(".gitattributes"));
        let _ = quest_runner::remove::remove_tree(&fixture.operator_home.join(".config/git"));
        let later = later_checkout(fixture);
        if later.exists() {
            let _ = quest_runner::remove::remove_tree(&later);
        }
        // Revision trees written while a control had rewritten the clone would hand the
        // rewrite to the jobs after it: the ones no job holds go (a held one was written
        // before the control ran).
        let state = StateDir::at(&fixture.state);
        quest_runner::workspace::revision_tree::gc(&state, std::time::Duration::ZERO);
    }
}
