//! Lowercase hex, the one encoding the runner writes into names (cache keys, clone
//! directories, tokens) and reads back (git object ids). Small enough not to need a crate.

use std::fmt;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex, two digits per byte.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Why a string is not the hex of the bytes wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not two digits per byte of the output.
    Length { digits: usize, bytes: usize },
    /// A character that is not a hex digit, at this (0-based) position.
    Digit { character: char, position: usize },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Length { digits, bytes } => {
                write!(f, "{digits} hex digits where {} were expected", bytes * 2)
            }
            DecodeError::Digit {
                character,
                position,
            } => {
                write!(f, "{character:?} at position {position} is not a hex digit")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes `text` (upper or lower case) into `out`, which it must fill exactly.
pub fn decode_to_slice(text: &str, out: &mut [u8]) -> Result<(), DecodeError> {
    let digits = text.as_bytes();
    if digits.len() != out.len() * 2 {
        return Err(DecodeError::Length {
            digits: digits.len(),
            bytes: out.len(),
        });
    }
    let value = |position: usize| -> Result<u8, DecodeError> {
        let c = digits[position];
        (c as char)
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or(DecodeError::Digit {
                character: text
                    .get(position..)
                    .and_then(|s| s.chars().next())
                    .unwrap_or('?'),
                position,
            })
    };
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = value(2 * i)? << 4 | value(2 * i + 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let text = encode(&all);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        let mut back = vec![0u8; all.len()];
        decode_to_slice(&text, &mut back).unwrap();
        assert_eq!(back, all);
        decode_to_slice(&text.to_uppercase(), &mut back).unwrap();
        assert_eq!(back, all);
    }

    #[test]
    fn names_what_is_wrong() {
        let mut out = [0u8; 2];
        assert_eq!(
            decode_to_slice("abc", &mut out),
            Err(DecodeError::Length {
                digits: 3,
                bytes: 2
            })
        );
        assert_eq!(
            decode_to_slice("abxd", &mut out),
            Err(DecodeError::Digit {
                character: 'x',
                position: 2
            })
        );
        // A multi-byte character is named whole, not as one of its bytes.
        assert_eq!(
            decode_to_slice("ébc", &mut out),
            Err(DecodeError::Digit {
                character: 'é',
                position: 0
            })
        );
    }
}
