//! The hashes locks pin artifacts by, and the one name each gives an artifact in the cache.
//!
//! npm's `integrity` is Subresource Integrity (`sha512-<base64>`, several space-separated);
//! pip's `--hash`, uv's `hash` and Cargo's `checksum` are SHA-256 in hex. Only SHA-256 and
//! stronger are taken: npm's old `sha1-` integrity names no artifact a registry could not
//! swap for another of its choosing, so such an entry is refused, not trusted.

use sha2::Digest as _;

/// The hash functions the cache keys by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algo {
    Sha256,
    Sha384,
    Sha512,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Sha384 => "sha384",
            Algo::Sha512 => "sha512",
        }
    }

    fn len(self) -> usize {
        match self {
            Algo::Sha256 => 32,
            Algo::Sha384 => 48,
            Algo::Sha512 => 64,
        }
    }

    fn parse(name: &str) -> Option<Algo> {
        match name {
            "sha256" => Some(Algo::Sha256),
            "sha384" => Some(Algo::Sha384),
            "sha512" => Some(Algo::Sha512),
            _ => None,
        }
    }
}

/// An artifact's expected hash: what it is stored and served by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    pub algo: Algo,
    pub bytes: Vec<u8>,
}

impl Digest {
    /// A hex digest of `algo` (pip's `--hash=sha256:…`, Cargo's `checksum`).
    pub fn from_hex(algo: Algo, hex: &str) -> Result<Digest, String> {
        let mut bytes = vec![0; algo.len()];
        crate::util::hex::decode_to_slice(hex, &mut bytes)
            .map_err(|e| format!("{hex:?} is not a {} digest: {e}", algo.name()))?;
        Ok(Digest { algo, bytes })
    }

    /// `sha256:<hex>` (uv's `hash`, pip's `--hash=`).
    pub fn from_prefixed_hex(text: &str) -> Result<Digest, String> {
        let (name, hex) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not <algorithm>:<hex>"))?;
        let algo = Algo::parse(name).ok_or_else(|| weak(name))?;
        Digest::from_hex(algo, hex)
    }

    /// The strongest hash of an SRI string (npm's `integrity`).
    pub fn from_sri(sri: &str) -> Result<Digest, String> {
        use base64::Engine as _;
        let mut best: Option<Digest> = None;
        let mut weakest = None;
        for part in sri.split_ascii_whitespace() {
            let Some((name, b64)) = part.split_once('-') else {
                return Err(format!("{part:?} is not <algorithm>-<base64>"));
            };
            let Some(algo) = Algo::parse(name) else {
                weakest = Some(name.to_string());
                continue;
            };
            // An SRI hash may carry options after `?`.
            let b64 = b64.split('?').next().unwrap_or(b64);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("{part:?}: {e}"))?;
            if bytes.len() != algo.len() {
                return Err(format!("{part:?} is not a {} digest", algo.name()));
            }
            if best.as_ref().is_none_or(|b| b.algo < algo) {
                best = Some(Digest { algo, bytes });
            }
        }
        match (best, weakest) {
            (Some(d), _) => Ok(d),
            (None, Some(name)) => Err(weak(&name)),
            (None, None) => Err("the integrity is empty".into()),
        }
    }

    pub fn hex(&self) -> String {
        crate::util::hex::encode(&self.bytes)
    }

    /// The artifact's name in the cache and the result: `sha512-<hex>`.
    pub fn key(&self) -> String {
        format!("{}-{}", self.algo.name(), self.hex())
    }

    /// Parses a [`Digest::key`] back (a cache file's name).
    pub fn from_key(key: &str) -> Option<Digest> {
        let (name, hex) = key.split_once('-')?;
        Digest::from_hex(Algo::parse(name)?, hex).ok()
    }
}

fn weak(name: &str) -> String {
    format!("{name} is not a hash the runner trusts to name an artifact (sha256, sha384 or sha512)")
}

/// Hashes bytes as they stream by, with the algorithm of the digest they must match.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Sha384 => Hasher::Sha384(sha2::Sha384::new()),
            Algo::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha384(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }

    pub fn finish(self) -> Digest {
        let (algo, bytes) = match self {
            Hasher::Sha256(h) => (Algo::Sha256, h.finalize().to_vec()),
            Hasher::Sha384(h) => (Algo::Sha384, h.finalize().to_vec()),
            Hasher::Sha512(h) => (Algo::Sha512, h.finalize().to_vec()),
        };
        Digest { algo, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sri_takes_the_strongest_and_refuses_sha1_alone() {
        let sha512 = "sha512-".to_string() + &"A".repeat(86) + "==";
        let sha256 = "sha256-".to_string() + &"A".repeat(43) + "=";
        let d = Digest::from_sri(&format!("{sha256} {sha512}")).unwrap();
        assert_eq!(d.algo, Algo::Sha512);
        let err = Digest::from_sri("sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap_err();
        assert!(err.contains("sha1 is not a hash"), "{err}");
        assert!(Digest::from_sri("sha512-AAAA").is_err());
    }

    #[test]
    fn hex_digests_have_their_algorithms_length() {
        let hex = "ab".repeat(32);
        let d = Digest::from_prefixed_hex(&format!("sha256:{hex}")).unwrap();
        assert_eq!(d.key(), format!("sha256-{hex}"));
        assert_eq!(Digest::from_key(&d.key()), Some(d));
        assert!(Digest::from_hex(Algo::Sha256, "abc").is_err());
        assert!(Digest::from_hex(Algo::Sha512, &hex).is_err());
        assert!(Digest::from_prefixed_hex("md5:00").is_err());
    }

    #[test]
    fn the_hasher_matches_a_known_digest() {
        let mut h = Hasher::new(Algo::Sha256);
        h.update(b"abc");
        assert_eq!(
            h.finish().hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
