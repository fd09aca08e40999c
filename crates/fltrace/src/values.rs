//! Flag values as the command line spells them (`100ms`, `1.5..3`, `0x1000..0x2000`), parsed
//! for clap by the commands' argument structs.

/// The longest time a window reaches, in seconds: its nanoseconds fit in a u64.
const MAX_WINDOW_S: f64 = u64::MAX as f64 / 1e9;

pub(crate) fn region_counts(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a range of region counts such as 10..1000"))?;
    let parse = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("`{v}` is not a count"))
    };
    let (a, b) = (parse(a)?, parse(b)?);
    if a < 3 || a > b {
        return Err(format!(
            "{s}: DAMON needs at least 3 regions and MIN <= MAX"
        ));
    }
    Ok((a, b))
}

pub(crate) fn addr_range(s: &str) -> Result<(u64, u64), String> {
    let parse = |v: &str| {
        u64::from_str_radix(v.trim_start_matches("0x"), 16)
            .map_err(|_| format!("`{v}` is not a hex address"))
    };
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a range such as 0x1000..0x2000"))?;
    let (a, b) = (parse(a)?, parse(b)?);
    if a >= b {
        return Err(format!("the range {s} is empty"));
    }
    Ok((a, b))
}

pub(crate) fn duration(s: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((s, "s"), |i| s.split_at(i));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as 100ms or 2s"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        _ => return Err(format!("`{s}`: the unit must be ms, s or m")),
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(format!("`{s}` must be positive"));
    }
    // Nanoseconds that fit in a u64, as every time fltrace keeps.
    if seconds > MAX_WINDOW_S {
        return Err(format!(
            "`{s}` is out of range (at most {MAX_WINDOW_S:.0} s, 584 years)"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

pub(crate) fn positive_mb(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be a positive number of MiB".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("`{s}` is not a whole number of MiB")),
    }
}

pub(crate) fn time_range(s: &str) -> Result<(f64, f64), String> {
    let (from, to) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a range such as 1.5..3"))?;
    let parse = |v: &str, default: f64| -> Result<f64, String> {
        if v.is_empty() {
            return Ok(default);
        }
        let seconds = v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("`{v}` is not a number of seconds"))?;
        if seconds > MAX_WINDOW_S {
            return Err(format!(
                "`{v}` seconds is out of range (at most {MAX_WINDOW_S:.0}, 584 years)"
            ));
        }
        Ok(seconds)
    };
    let (from, to) = (parse(from, 0.0)?, parse(to, MAX_WINDOW_S)?);
    if from > to {
        return Err(format!("the range {s} ends before it starts"));
    }
    Ok((from, to))
}

/// `top -d SECS`: seconds between screens, from a tenth of a second to a day (as `top -d`,
/// fractions allowed).
pub(crate) fn interval_seconds(s: &str) -> Result<f64, String> {
    let seconds: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.1..=86400.0).contains(&seconds) {
        return Err(format!("{s}: the interval is 0.1 to 86400 seconds"));
    }
    Ok(seconds)
}

/// A process or thread id, the one parser of every command's `-p`, `--tid` and `--pid-a`:
/// lists (`-p A,B`) are split by clap before, where the flag takes several.
pub(crate) fn pid(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("0 is not a process id".into()),
        Ok(pid) if pid <= i32::MAX as u32 => Ok(pid),
        _ if s.contains(',') => Err(format!(
            "`{s}`: this flag takes one process id (a list is for record, count and the other tracing commands)"
        )),
        _ => Err(format!("`{s}` is not a process id")),
    }
}

/// [`pid`] for the commands that hand it to the kernel's signed type.
pub(crate) fn pid_i32(s: &str) -> Result<i32, String> {
    pid(s).map(|p| p as i32)
}

/// The one pid of a flag that picks a recording's process (`report -p`, `diff --pid-a`).
pub(crate) fn one_pid(s: &str) -> Result<u32, String> {
    if s.contains(',') {
        return Err(format!(
            "`{s}`: -p picks one process of the recording (and the newest recording that traced it); --comm or --tid narrow to several threads"
        ));
    }
    pid(s)
}

/// A share of all faults, 0 to 100.
pub(crate) fn percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Ok(_) => Err(format!("`{s}` is not a percentage from 0 to 100")),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One parser for every pid: numbers, not 0, lists refused where one is taken.
    #[test]
    fn pids() {
        assert_eq!(pid("42"), Ok(42));
        assert!(pid("0").is_err());
        assert!(pid("x").unwrap_err().contains("not a process id"));
        assert!(pid("1,2").unwrap_err().contains("takes one process id"));
        assert!(one_pid("1,2").unwrap_err().contains("--comm or --tid"));
        assert_eq!(pid_i32("7"), Ok(7));
        assert!(pid("4294967295").is_err());
    }

    /// Percentages from 0 to 100, with or without the sign.
    #[test]
    fn percentages() {
        assert_eq!(percent("0.5"), Ok(0.5));
        assert_eq!(percent("100%"), Ok(100.0));
        assert!(percent("200").is_err());
        assert!(percent("-1").is_err());
    }
}
