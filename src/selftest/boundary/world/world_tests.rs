use super::*;

/// Two worlds planting under one parent neither had: each removes its own plant only, and the
/// parent only if it made it and nothing else is in it.
#[test]
fn a_world_removes_only_what_it_made() {
    let base = tempfile::tempdir().unwrap();
    let shared = base.path().join("run/secrets");
    let (mut a, mut b) = (Planted::default(), Planted::default());
    assert!(a.plant(&shared.join("qr-a"), None).unwrap());
    assert!(a.plant(&shared.join("qr-a/secret"), Some("A")).unwrap());
    assert!(b.plant(&shared.join("qr-b"), None).unwrap());
    assert!(b.plant(&shared.join("qr-b/secret"), Some("B")).unwrap());
    assert_eq!(a.parents, [base.path().join("run"), shared.clone()]);
    assert!(b.parents.is_empty());

    a.remove();
    assert!(!shared.join("qr-a").exists());
    assert_eq!(
        std::fs::read_to_string(shared.join("qr-b/secret")).unwrap(),
        "B",
        "the other world's plant is kept, and the parent with it"
    );
    b.remove();
    assert!(!shared.join("qr-b").exists());

    // Alone, a world removes the parents it made.
    let mut c = Planted::default();
    assert!(c.plant(&base.path().join("solo/qr-c"), Some("C")).unwrap());
    c.remove();
    assert!(!base.path().join("solo").exists());
}

/// A plant is created new: a name that exists already (another world's) fails the run.
#[test]
fn a_plant_never_takes_over_an_existing_name() {
    let base = tempfile::tempdir().unwrap();
    let path = base.path().join("qr-x");
    std::fs::write(&path, "someone else's").unwrap();
    let mut p = Planted::default();
    assert!(p.plant(&path, Some("mine")).is_err());
    p.remove();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "someone else's");
}

#[test]
fn tokens_differ_within_a_process() {
    assert_ne!(token(), token());
}

/// Two worlds at once, as two suites on one machine: dropping one leaves every plant of the
/// other where it was.
#[test]
fn worlds_at_once_leave_each_other_alone() {
    let first = World::new(AgentKind::Claude).unwrap();
    let second = World::new(AgentKind::Opencode).unwrap();
    let planted = |w: &World| {
        let mut paths: Vec<PathBuf> = w.system_secrets.iter().map(|(_, p)| p.clone()).collect();
        paths.extend(
            [&w.root_secret, &w.home_secret, &w.run_user_secret]
                .into_iter()
                .flatten()
                .cloned(),
        );
        paths.push(w.account_file.clone());
        paths.push(w.config_file.parent().unwrap().to_path_buf());
        paths
    };
    let kept = planted(&second);
    let gone = planted(&first);
    drop(first);
    for p in &kept {
        assert!(p.exists(), "{} went with the other world", p.display());
    }
    for p in &gone {
        assert!(!p.exists(), "{} was left", p.display());
    }
    drop(second);
    for p in &kept {
        assert!(!p.exists(), "{} was left", p.display());
    }
}
