use super::*;

fn queue(postgres: &str) -> QueueConfig {
    QueueConfig {
        postgres: postgres.into(),
        password_file: None,
        lease: None,
    }
}

#[test]
fn connection_strings_urls_and_socket_paths_are_understood() {
    let t = PgTarget::from_config(&queue("host=db.example.org port=5433 dbname=q user=r")).unwrap();
    assert_eq!(
        t.describe(),
        "PostgreSQL at db.example.org:5433 (database q, user r)"
    );
    let t = PgTarget::from_config(&queue("postgresql://r@db.example.org/q")).unwrap();
    assert_eq!(
        t.describe(),
        "PostgreSQL at db.example.org:5432 (database q, user r)"
    );
    let t = PgTarget::from_config(&queue("/run/postgresql")).unwrap();
    assert!(
        t.describe().contains("/run/postgresql/.s.PGSQL.5432"),
        "{}",
        t.describe()
    );
    let t = PgTarget::from_config(&queue("/tmp/x/.s.PGSQL.6000")).unwrap();
    assert!(
        t.describe().contains("/tmp/x/.s.PGSQL.6000"),
        "{}",
        t.describe()
    );
    // No host: the distributions' socket directory, as libpq.
    let t = PgTarget::from_config(&queue("dbname=q")).unwrap();
    assert!(
        t.describe().contains("/run/postgresql/.s.PGSQL.5432"),
        "{}",
        t.describe()
    );
}

#[test]
fn passwords_tls_and_bad_values_are_refused_naming_the_field() {
    for bad in [
        "host=db user=r password=hunter2",
        "postgresql://r:hunter2@db/q",
    ] {
        let err = PgTarget::from_config(&queue(bad)).unwrap_err().to_string();
        assert!(err.contains("password_file"), "{bad}: {err}");
        assert!(
            !err.contains("hunter2"),
            "the password is not repeated: {err}"
        );
    }
    let err = PgTarget::from_config(&queue("host=db sslmode=require"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sslmode=require"), "{err}");
    let err = PgTarget::from_config(&queue("host=db nonsense=1"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("postgres:"), "{err}");
    let err = PgTarget::from_config(&queue("/run/x/.s.PGSQL.port"))
        .unwrap_err()
        .to_string();
    assert!(err.contains(".s.PGSQL.<port>"), "{err}");
    let mut q = queue("host=db");
    q.password_file = Some("relative/pw".into());
    let err = PgTarget::from_config(&q).unwrap_err().to_string();
    assert!(err.starts_with("password_file:"), "{err}");
    let mut q = queue("host=db");
    q.lease = Some(Duration::from_millis(10));
    let err = PgTarget::from_config(&q).unwrap_err().to_string();
    assert!(err.starts_with("lease:"), "{err}");
    // The file's text is parsed once, when the config is loaded.
    let file = |lease: &str| QueueFile {
        lease: Some(lease.into()),
        ..QueueFile::from(queue("host=db"))
    };
    assert_eq!(file("10ms").parse().unwrap_err().field, "lease");
    assert_eq!(file("soon").parse().unwrap_err().field, "lease");
    let q = file("45s").parse().unwrap();
    assert_eq!(q.lease(), Duration::from_secs(45));
}

#[test]
fn the_password_file_loses_its_line_break_and_must_not_be_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pw");
    std::fs::write(&path, "s3cret\r\n").unwrap();
    assert_eq!(read_password(&path).unwrap(), b"s3cret");
    std::fs::write(&path, "\n").unwrap();
    assert!(matches!(
        read_password(&path),
        Err(ConnectError::EmptyPassword(_))
    ));
    let missing = dir.path().join("absent");
    let err = read_password(&missing).unwrap_err().to_string();
    assert!(err.contains("absent"), "{err}");
}
