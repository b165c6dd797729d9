//! Units the runner reads from people (config files, flags) and writes for them: byte sizes,
//! CPU shares, signal names. Parsing errors are one line naming the text and what was wanted.

use rustix::process::Signal;

/// Parses a size: bytes, or a number with K, M, G or T (powers of 1024, `B`/`iB` allowed).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 4G, 512M, 1073741824)"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{text:?}: unknown unit (K, M, G, T)")),
    };
    n.checked_mul(1u64 << shift)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// Parses a CPU share (`1.5`: one and a half cores) into thousandths of a CPU.
/// [`parse_size`], or `0` (a bound that keeps nothing).
pub fn parse_size_or_zero(text: &str) -> Result<u64, String> {
    match text.trim() {
        "0" => Ok(0),
        t => parse_size(t),
    }
}

pub fn parse_cpus(text: &str) -> Result<u64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of CPUs (e.g. 1.5)"))?;
    if !(0.001..=4096.0).contains(&v) {
        return Err(format!("{text:?}: CPUs must be between 0.001 and 4096"));
    }
    Ok((v * 1000.0).round() as u64)
}

/// The name of a signal that commonly ends an agent.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match Signal::from_named_raw(signal)? {
        Signal::HUP => "SIGHUP",
        Signal::INT => "SIGINT",
        Signal::QUIT => "SIGQUIT",
        Signal::ABORT => "SIGABRT",
        Signal::BUS => "SIGBUS",
        Signal::KILL => "SIGKILL",
        Signal::SEGV => "SIGSEGV",
        Signal::PIPE => "SIGPIPE",
        Signal::TERM => "SIGTERM",
        Signal::XCPU => "SIGXCPU",
        Signal::XFSZ => "SIGXFSZ",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units_and_refuse_others() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size(" 512MiB "), Ok(512 << 20));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert!(parse_size("4X").unwrap_err().contains("unknown unit"));
        assert!(parse_size("G").unwrap_err().contains("is not a size"));
        assert!(parse_size("0").unwrap_err().contains("out of range"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn cpus_are_thousandths_within_bounds() {
        assert_eq!(parse_cpus("1.5"), Ok(1500));
        assert_eq!(parse_cpus("0.001"), Ok(1));
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("many")
            .unwrap_err()
            .contains("is not a number of CPUs"));
    }

    #[test]
    fn common_signals_have_names() {
        assert_eq!(signal_name(9), Some("SIGKILL"));
        assert_eq!(signal_name(15), Some("SIGTERM"));
        assert_eq!(signal_name(Signal::XCPU.as_raw()), Some("SIGXCPU"));
        assert_eq!(signal_name(Signal::USR1.as_raw()), None);
        assert_eq!(signal_name(0), None);
    }
}
