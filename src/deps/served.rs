//! What one job is served: exactly its revision's locked set, by the addresses its package
//! managers ask for, and the metadata they need, made from that set alone — npm's packument
//! of a locked package lists only its locked versions, a PyPI simple page only the locked
//! files, a crate's index file only the locked versions' lines. A request for anything else
//! has no answer here, whatever another job's locks hold: the set is built per job, from its
//! own locks, and nothing is looked up across jobs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use super::digest::Digest;
use super::pin::{canonical_path, pypi_normal, Artifact, Ecosystem};
use super::resolve::index_path;

/// An answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An object of the cache.
    Object(Digest),
    /// A document made for this job.
    Document {
        content_type: &'static str,
        body: Bytes,
    },
}

/// One job's locked set, as its proxy answers from it.
#[derive(Debug, Default)]
pub struct Served {
    objects: HashMap<(String, String), Digest>,
    npm: BTreeMap<String, Vec<Artifact>>,
    pypi: BTreeMap<String, Vec<Artifact>>,
    crates: BTreeMap<String, Vec<String>>,
}

/// The hosts whose requests the runner answers for a job with `ecosystems` locked.
pub fn hosts_of(
    ecosystems: &BTreeSet<Ecosystem>,
    artifact_hosts: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut hosts = artifact_hosts.clone();
    for e in ecosystems {
        let extra: &[&str] = match e {
            Ecosystem::Npm => &[],
            Ecosystem::Pypi => &["pypi.org", "files.pythonhosted.org"],
            Ecosystem::Crates => &["index.crates.io", "static.crates.io"],
        };
        hosts.extend(extra.iter().map(|h| h.to_string()));
    }
    hosts
}

impl Served {
    /// The set of `artifacts` (each verified in the cache) and the crates' index lines, by
    /// lowercase name.
    pub fn new(artifacts: Vec<Artifact>, crate_lines: Vec<(String, String)>) -> Served {
        let mut served = Served::default();
        for a in artifacts {
            served.objects.insert(a.url.key(), a.digest.clone());
            match a.ecosystem {
                Ecosystem::Npm => served.npm.entry(a.name.clone()).or_default().push(a),
                Ecosystem::Pypi => served.pypi.entry(pypi_normal(&a.name)).or_default().push(a),
                Ecosystem::Crates => {}
            }
        }
        for (name, line) in crate_lines {
            let lines = served.crates.entry(name).or_default();
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        served
    }

    /// How many distinct artifacts the set holds.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every digest of the set (the running jobs' objects, which a collection keeps).
    pub fn digests(&self) -> impl Iterator<Item = &Digest> {
        self.objects.values()
    }

    /// The answer to a `GET` of `path` (its query dropped) on `host`, if the set has one;
    /// `accept` is the request's `Accept`, which PyPI's clients choose the page's form by.
    ///
    /// With `registry_reachable` (a trusted job, whose other reads go to the registry), the
    /// registry's own metadata is the job's: a packument, simple page or index file of the
    /// locked versions alone would keep it from installing any other. The set then answers
    /// its artifacts, and crates.io's `config.json`, whose download address is the one its
    /// artifacts are served at.
    pub fn answer(
        &self,
        host: &str,
        path: &str,
        accept: Option<&str>,
        registry_reachable: bool,
    ) -> Option<Answer> {
        let path = path.split('?').next().unwrap_or(path);
        let path = canonical_path(path).ok()?;
        if let Some(d) = self.objects.get(&(host.to_string(), path.clone())) {
            return Some(Answer::Object(d.clone()));
        }
        if registry_reachable {
            return match (host, path.as_str()) {
                ("index.crates.io", "/config.json") => self.crate_index(&path),
                _ => None,
            };
        }
        match host {
            "registry.npmjs.org" | "registry.yarnpkg.com" => self.packument(&path),
            "pypi.org" => self.simple_page(&path, accept.unwrap_or("")),
            "index.crates.io" => self.crate_index(&path),
            _ => None,
        }
    }

    /// `/<name>` (`/@scope/name`, however the slash is spelt): the locked versions only.
    fn packument(&self, path: &str) -> Option<Answer> {
        let name = path.strip_prefix('/')?;
        let versions = self.npm.get(name)?;
        let mut all = serde_json::Map::new();
        for a in versions {
            let mut entry = a.npm_entry.clone().unwrap_or_default();
            entry.insert("name".into(), name.into());
            entry.insert("version".into(), a.version.clone().into());
            entry.insert(
                "dist".into(),
                serde_json::json!({ "tarball": a.url.url(), "integrity": sri(&a.digest) }),
            );
            all.insert(a.version.clone(), entry.into());
        }
        let latest = versions
            .last()
            .map(|a| a.version.clone())
            .unwrap_or_default();
        let doc = serde_json::json!({
            "name": name,
            "dist-tags": { "latest": latest },
            "versions": all,
        });
        Some(json("application/json", &doc))
    }

    /// `/simple/<project>/`: PEP 691's JSON when the client asks for it, else PEP 503's HTML.
    fn simple_page(&self, path: &str, accept: &str) -> Option<Answer> {
        let project = path.strip_prefix("/simple/")?.trim_end_matches('/');
        if project.contains('/') {
            return None;
        }
        let name = pypi_normal(project);
        let files = self.pypi.get(&name)?;
        if accept.contains("application/vnd.pypi.simple.v1+json") {
            let files: Vec<serde_json::Value> = files
                .iter()
                .map(|a| {
                    let mut f = serde_json::json!({
                        "filename": a.filename,
                        "url": a.url.url(),
                        "hashes": { a.digest.algo.name(): a.digest.hex() },
                    });
                    if let Some(rp) = &a.requires_python {
                        f["requires-python"] = rp.clone().into();
                    }
                    f
                })
                .collect();
            let doc = serde_json::json!({
                "meta": { "api-version": "1.0" },
                "name": name,
                "files": files,
            });
            return Some(json("application/vnd.pypi.simple.v1+json", &doc));
        }
        let mut html = format!("<!DOCTYPE html>\n<html><body><h1>Links for {name}</h1>\n");
        for a in files {
            let rp = a
                .requires_python
                .as_deref()
                .map(|r| format!(" data-requires-python=\"{}\"", html_escape(r)))
                .unwrap_or_default();
            html.push_str(&format!(
                "<a href=\"{}#{}={}\"{rp}>{}</a><br/>\n",
                html_escape(&a.url.url()),
                a.digest.algo.name(),
                a.digest.hex(),
                html_escape(&a.filename)
            ));
        }
        html.push_str("</body></html>\n");
        Some(Answer::Document {
            content_type: "text/html",
            body: Bytes::from(html),
        })
    }

    /// `/config.json`, and each locked crate's file of the sparse index.
    fn crate_index(&self, path: &str) -> Option<Answer> {
        if path == "/config.json" && !self.crates.is_empty() {
            let doc = serde_json::json!({
                "dl": "https://static.crates.io/crates/{crate}/{crate}-{version}.crate",
                "api": "https://crates.io",
            });
            return Some(json("application/json", &doc));
        }
        let name = path.rsplit('/').next()?.to_ascii_lowercase();
        let lines = self.crates.get(&name)?;
        if path.strip_prefix('/')? != index_path(&name) {
            return None;
        }
        let mut body = lines.join("\n");
        body.push('\n');
        Some(Answer::Document {
            content_type: "text/plain",
            body: Bytes::from(body),
        })
    }
}

fn json(content_type: &'static str, doc: &serde_json::Value) -> Answer {
    Answer::Document {
        content_type,
        body: Bytes::from(doc.to_string()),
    }
}

/// A digest as SRI (`sha512-<base64>`), as npm's `integrity` writes it.
fn sri(d: &Digest) -> String {
    use base64::Engine as _;
    format!(
        "{}-{}",
        d.algo.name(),
        base64::engine::general_purpose::STANDARD.encode(&d.bytes)
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::digest::Algo;
    use crate::deps::pin::RegistryUrl;

    fn artifact(e: Ecosystem, name: &str, version: &str, url: &str, fill: u8) -> Artifact {
        Artifact {
            ecosystem: e,
            name: name.into(),
            version: version.into(),
            digest: Digest {
                algo: Algo::Sha256,
                bytes: vec![fill; 32],
            },
            url: RegistryUrl::parse(url).unwrap(),
            filename: url.rsplit('/').next().unwrap().into(),
            requires_python: Some(">=3.7".into()),
            npm_entry: None,
            lock: "lock".into(),
        }
    }

    #[test]
    fn a_job_is_served_its_set_and_nothing_else() {
        let served = Served::new(
            vec![
                artifact(
                    Ecosystem::Npm,
                    "@s/p",
                    "1.0.0",
                    "https://registry.npmjs.org/@s/p/-/p-1.0.0.tgz",
                    1,
                ),
                artifact(
                    Ecosystem::Pypi,
                    "Six",
                    "1.16.0",
                    "https://files.pythonhosted.org/packages/a/b/six-1.16.0-py2.py3-none-any.whl",
                    2,
                ),
            ],
            vec![("itoa".into(), r#"{"name":"itoa","vers":"1.0.11"}"#.into())],
        );
        let untrusted =
            |host: &str, path: &str, accept: Option<&str>| served.answer(host, path, accept, false);
        let trusted = |host: &str, path: &str| served.answer(host, path, None, true);
        let obj = untrusted("registry.npmjs.org", "/@s%2fp/-/p-1.0.0.tgz", None);
        assert!(matches!(obj, Some(Answer::Object(_))), "{obj:?}");
        assert!(untrusted("registry.npmjs.org", "/@s/p/-/p-2.0.0.tgz", None).is_none());
        assert!(untrusted("registry.yarnpkg.com", "/@s/p/-/p-1.0.0.tgz", None).is_none());
        let Some(Answer::Document { body, .. }) = untrusted("registry.npmjs.org", "/@s%2Fp", None)
        else {
            panic!("a packument")
        };
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            doc["versions"]["1.0.0"]["dist"]["tarball"],
            "https://registry.npmjs.org/@s/p/-/p-1.0.0.tgz"
        );
        assert!(untrusted("registry.npmjs.org", "/left-pad", None).is_none());

        let json = untrusted(
            "pypi.org",
            "/simple/six/",
            Some("application/vnd.pypi.simple.v1+json"),
        );
        let Some(Answer::Document { body, content_type }) = json else {
            panic!("a page")
        };
        assert_eq!(content_type, "application/vnd.pypi.simple.v1+json");
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["files"].as_array().unwrap().len(), 1);
        let Some(Answer::Document { body, .. }) =
            untrusted("pypi.org", "/simple/SIX", Some("text/html"))
        else {
            panic!("a page")
        };
        assert!(String::from_utf8_lossy(&body).contains("#sha256=0202"));
        assert!(untrusted("pypi.org", "/simple/requests/", None).is_none());

        assert!(untrusted("index.crates.io", "/config.json", None).is_some());
        assert!(untrusted("index.crates.io", "/it/oa/itoa", None).is_some());
        assert!(untrusted("index.crates.io", "/xx/yy/itoa", None).is_none());
        assert!(untrusted("index.crates.io", "/se/rd/serde", None).is_none());

        // A trusted job's metadata is the registry's; its artifacts and cargo's config are
        // the set's.
        assert!(trusted("registry.npmjs.org", "/@s%2Fp").is_none());
        assert!(trusted("pypi.org", "/simple/six/").is_none());
        assert!(trusted("index.crates.io", "/it/oa/itoa").is_none());
        assert!(trusted("index.crates.io", "/config.json").is_some());
        assert!(trusted("registry.npmjs.org", "/@s/p/-/p-1.0.0.tgz").is_some());
    }
}
