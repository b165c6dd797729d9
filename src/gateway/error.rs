//! Why the gateway could not start, open a job, or give a job its credential; and why an
//! account has no route through it. Each names the file, setting or socket at fault.

use std::path::PathBuf;

/// The gateway itself: its socket, its TLS client, a job's token and log.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("binding the model gateway's port on loopback: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the model gateway's socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("TLS configuration (the system's roots, a trusted CA): {0}")]
    Tls(#[source] rustls::Error),
    #[error("making the job's gateway token: {0}")]
    Token(#[source] std::io::Error),
    #[error("creating {}: {source}", path.display())]
    JobLog {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A credential file that gives no credential.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("{} is not JSON: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} has no api key for {provider}", path.display())]
    NoApiKey { path: PathBuf, provider: String },
    #[error("{} holds no claudeAiOauth login", path.display())]
    NoLogin { path: PathBuf },
    #[error("{}: claudeAiOauth.{field} is missing", path.display())]
    MissingField { path: PathBuf, field: &'static str },
}

/// Why a request got no credential: a key that is no header value, or a Claude `/login` that
/// could not be read, locked or refreshed. The gateway answers the request 502 with it.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the credential is not a header value")]
    NotAHeaderValue,
    #[error(transparent)]
    Read(#[from] CredentialError),
    #[error("creating {}: {source}", dir.display())]
    LockDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("another runner held the login refresh lock {} for {secs}s", lock.display())]
    LockHeld { lock: PathBuf, secs: u64 },
    #[error("locking {}: {source}", lock.display())]
    Lock {
        lock: PathBuf,
        source: std::io::Error,
    },
    #[error("refreshing the login of {}: no answer in {secs}s", file.display())]
    RefreshTimeout { file: PathBuf, secs: u64 },
    #[error("refreshing the login of {}: {problem}", file.display())]
    Refresh {
        file: PathBuf,
        problem: RefreshProblem,
    },
    #[error("writing the refreshed login to {}: {source}", file.display())]
    Write {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// What went wrong asking the token endpoint for a new access token.
#[derive(Debug, thiserror::Error)]
pub enum RefreshProblem {
    #[error("{0}")]
    Request(String),
    #[error("the token endpoint answered {status}: {text}")]
    Status {
        status: http::StatusCode,
        text: String,
    },
    #[error("the token endpoint's answer is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the answer has no access_token")]
    NoAccessToken,
}

/// An account the gateway cannot route: what in its config to set or change (the text
/// names the setting, `accounts.<name>.…`).
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("accounts.{account}.base_url: {source}")]
    BaseUrl {
        account: String,
        source: super::upstream::UpstreamUrlError,
    },
    #[error("account {account} has no credentials configured")]
    NoCredentials { account: String },
    #[error("accounts.{account}: opencode accounts name their model (`provider/model`)")]
    NoModel { account: String },
    #[error("accounts.{account}.model {model:?} is not `provider/model`")]
    ModelWithoutProvider { account: String, model: String },
    #[error(
        "accounts.{account}.config: provider.{provider}.options.apiKey must be a \
         {{file:/absolute/path}} reference (the key itself never belongs in the config)"
    )]
    KeyNotAFileReference { account: String, provider: String },
    #[error(
        "account {account}: no key for provider {provider} (an auth.json entry of type api, \
         or provider.{provider}.options.apiKey as {{file:...}})"
    )]
    NoKey { account: String, provider: String },
    #[error(
        "accounts.{account}.config: set provider.{provider}.options.baseURL: the gateway \
         must know where {provider}'s API is"
    )]
    NoBaseUrl { account: String, provider: String },
    #[error("accounts.{account}: provider.{provider}.options.baseURL: {source}")]
    ProviderBaseUrl {
        account: String,
        provider: String,
        source: super::upstream::UpstreamUrlError,
    },
}

/// What is wrong with an account's files before a job runs ([`super::account_check`]), naming
/// the account, its config field and the file.
#[derive(Debug, thiserror::Error)]
pub enum AccountFileError {
    #[error("account {account}: {field}: {problem}")]
    File {
        account: String,
        field: String,
        problem: FileProblem,
    },
    #[error(
        "account {0} has no credential: set accounts.{0}.api_key_file (a file holding the API \
         key, e.g. \"/run/secrets/anthropic-key\") or accounts.{0}.credentials_file (a /login's \
         .credentials.json)"
    )]
    NoCredential(String),
    #[error(transparent)]
    Route(#[from] AccountError),
}

/// Why one of an account's files would give a job no credential.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("{}: {source}", path.display())]
    Missing {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a file", path.display())]
    NotAFile { path: PathBuf },
    #[error("{}: cannot be read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is not a JSON object (opencode's auth.json: {{\"anthropic\": {{\"type\": \"api\", \
         \"key\": \"...\"}}}})",
        path.display()
    )]
    NotAnObject { path: PathBuf },
    #[error(
        "{} holds more than one word: a key file holds the key alone (a /login's \
         .credentials.json goes in credentials_file)",
        path.display()
    )]
    MoreThanOneWord { path: PathBuf },
    #[error(transparent)]
    Credential(#[from] CredentialError),
}
