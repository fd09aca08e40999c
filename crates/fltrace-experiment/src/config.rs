//! Configurations: how each workload of a series is run (untraced, recorded with which
//! options, on which NUMA node), read from a TOML file or the defaults `dry` and `record`.

use std::path::{Path, PathBuf};

use fltrace_capture::EvictionPolicy;
use serde::Deserialize;

use crate::Error;

/// What a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The workload alone, untraced: its natural run time and peak memory.
    Dry,
    /// `fltrace record` of the workload.
    Record,
    /// `fltrace wss` of the workload (working-set size over time).
    Wss,
}

/// Local memory of far-memory emulation (`record -L`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, Deserialize)]
pub enum LocalMemory {
    /// A fixed number of MB.
    Mb(u64),
    /// A fraction (0, 1] of the workload's peak resident memory in the series' dry runs.
    OfDryPeak(f64),
}

/// One configuration of a series.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct Config {
    /// Its name: the `config=NAME` directory level.
    pub name: String,
    /// What runs.
    pub mode: Mode,
    /// `record --allocs`.
    pub allocs: bool,
    /// `record -L`.
    pub local: Option<LocalMemory>,
    /// `record -M` in MB; by default twice the local memory's base (the dry peak, or `-L`),
    /// at least 256 MB more than it.
    pub max_mb: Option<u64>,
    /// `record --policy`.
    #[serde(default, with = "policy_name")]
    pub policy: Option<EvictionPolicy>,
    /// `record --access-samples --freq HZ`.
    pub access_samples: Option<u64>,
    /// The NUMA node serving the memory of the workload (and of fltrace), `MPOL_BIND`.
    pub mem_node: Option<u32>,
    /// The NUMA node whose CPUs the workload (and fltrace) run on.
    pub cpu_node: Option<u32>,
    /// A directory whose files back the workload's heap (Heimdallr's PMEM mode): each run gets
    /// a directory of its own in it, where the preloaded library creates and grows the files.
    #[serde(default)]
    pub pmem_dir: Option<PathBuf>,
    /// Keep each run's backing files after it ends (by default they are removed).
    #[serde(default)]
    pub keep_backing: bool,
}

/// A configuration as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    mode: Option<Mode>,
    #[serde(default)]
    allocs: bool,
    local: Option<RawLocal>,
    max_mb: Option<u64>,
    #[serde(default, with = "policy_name")]
    policy: Option<EvictionPolicy>,
    access_samples: Option<u64>,
    mem_node: Option<u32>,
    cpu_node: Option<u32>,
    pmem_dir: Option<PathBuf>,
    #[serde(default)]
    keep_backing: bool,
}

/// A policy in files by its name (`policy = "clock"`), the value of `record --policy`.
mod policy_name {
    use fltrace_capture::EvictionPolicy;
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(
        policy: &Option<EvictionPolicy>,
        to: S,
    ) -> Result<S::Ok, S::Error> {
        policy.map(EvictionPolicy::name).serialize(to)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        from: D,
    ) -> Result<Option<EvictionPolicy>, D::Error> {
        let Some(name) = Option::<String>::deserialize(from)? else {
            return Ok(None);
        };
        EvictionPolicy::from_name(&name).map(Some).ok_or_else(|| {
            let names: Vec<&str> = EvictionPolicy::ALL.map(EvictionPolicy::name).into();
            D::Error::custom(format!(
                "policy `{name}` is not one of {}",
                names.join(", ")
            ))
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawLocal {
    Mb(u64),
    Fraction(f64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    config: Vec<RawConfig>,
}

/// The configurations without a file: `dry` (untraced) and `record`.
pub fn defaults() -> Vec<Config> {
    vec![
        Config::new("dry", Mode::Dry),
        Config::new("record", Mode::Record),
    ]
}

/// Whether a series of `configs` needs the preloaded library from `fltrace runs` itself (see
/// [`Config::preloads_itself`]); record-mode configurations leave it to `fltrace record`.
pub fn preload_needed(configs: &[Config]) -> bool {
    configs.iter().any(Config::preloads_itself)
}

impl Config {
    /// Whether its runs need the preloaded library from `fltrace runs` itself: dry runs with a
    /// `pmem_dir` (`fltrace record` finds the library for the others).
    pub fn preloads_itself(&self) -> bool {
        self.mode == Mode::Dry && self.pmem_dir.is_some()
    }

    /// A configuration of `mode` with no options.
    pub fn new(name: &str, mode: Mode) -> Config {
        Config {
            name: name.to_owned(),
            mode,
            allocs: false,
            local: None,
            max_mb: None,
            policy: None,
            access_samples: None,
            mem_node: None,
            cpu_node: None,
            pmem_dir: None,
            keep_backing: false,
        }
    }

    /// The options of `fltrace record` (or `wss`) this configuration adds, except `-L`/`-M`,
    /// which depend on the dry peak.
    pub fn record_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if self.allocs {
            flags.push("--allocs".to_owned());
        }
        if let Some(policy) = self.policy {
            flags.extend(["--policy".to_owned(), policy.name().to_owned()]);
        }
        if let Some(hz) = self.access_samples {
            flags.extend([
                "--access-samples".to_owned(),
                "--freq".to_owned(),
                hz.to_string(),
            ]);
        }
        flags
    }
}

/// Reads the configurations of a TOML file:
///
/// ```toml
/// [[config]]
/// name = "dry"
/// mode = "dry"
///
/// [[config]]
/// name = "half"
/// allocs = true
/// local = "50%"      # of the dry peak; or a number of MB: local = 100
/// policy = "clock"
/// mem_node = 0
/// cpu_node = 0
///
/// [[config]]
/// name = "pmem"
/// pmem_dir = "/mnt/pmem"   # the heap in files of this directory (Heimdallr's PMEM mode)
/// keep_backing = false     # remove each run's files when it ends (the default)
/// ```
pub fn from_file(path: &Path) -> Result<Vec<Config>, Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    parse(&text).map_err(|e| match e {
        ParseError::Syntax(source) => Error::ConfigSyntax {
            path: path.to_owned(),
            source: Box::new(source),
        },
        ParseError::Invalid(message) => Error::Invalid(format!("{}: {message}", path.display())),
    })
}

/// Why a configuration text was refused.
#[derive(Debug)]
pub enum ParseError {
    /// Not TOML, or not of the expected shape.
    Syntax(toml::de::Error),
    /// Well-formed but not usable.
    Invalid(String),
}

/// Parses and validates configuration text (see [`from_file`]).
pub fn parse(text: &str) -> Result<Vec<Config>, ParseError> {
    let raw: RawFile = toml::from_str(text).map_err(ParseError::Syntax)?;
    if raw.config.is_empty() {
        return Err(ParseError::Invalid(
            "no configuration: add at least one [[config]] table with a name".into(),
        ));
    }
    let mut configs: Vec<Config> = Vec::new();
    for raw in raw.config {
        let invalid = |m: String| ParseError::Invalid(format!("configuration `{}`: {m}", raw.name));
        check_name(&raw.name).map_err(|m| ParseError::Invalid(format!("configuration {m}")))?;
        if configs.iter().any(|c| c.name == raw.name) {
            return Err(invalid("the name is given twice".into()));
        }
        let mode = raw.mode.unwrap_or(Mode::Record);
        let local = match raw.local {
            None => None,
            Some(RawLocal::Mb(0)) => return Err(invalid("local must be positive".into())),
            Some(RawLocal::Mb(mb)) => Some(LocalMemory::Mb(mb)),
            Some(RawLocal::Fraction(f)) => {
                Some(LocalMemory::OfDryPeak(fraction(f).map_err(invalid)?))
            }
            Some(RawLocal::Text(text)) => {
                let percent = text
                    .trim()
                    .strip_suffix('%')
                    .and_then(|p| p.trim().parse::<f64>().ok())
                    .ok_or_else(|| {
                        invalid(format!(
                            "local = \"{text}\" is neither MB (local = 100) nor a percentage of the dry peak (local = \"50%\")"
                        ))
                    })?;
                Some(LocalMemory::OfDryPeak(
                    fraction(percent / 100.0).map_err(invalid)?,
                ))
            }
        };
        if raw.access_samples == Some(0) {
            return Err(invalid(
                "access_samples is a frequency in Hz: positive".into(),
            ));
        }
        let config = Config {
            name: raw.name.clone(),
            mode,
            allocs: raw.allocs,
            local,
            max_mb: raw.max_mb,
            policy: raw.policy,
            access_samples: raw.access_samples,
            mem_node: raw.mem_node,
            cpu_node: raw.cpu_node,
            pmem_dir: raw.pmem_dir,
            keep_backing: raw.keep_backing,
        };
        if let Some(dir) = &config.pmem_dir {
            if !dir.is_absolute() {
                return Err(invalid(format!(
                    "pmem_dir `{}` must be an absolute path",
                    dir.display()
                )));
            }
            if mode == Mode::Wss {
                return Err(invalid(
                    "pmem_dir applies to mode = \"dry\" or \"record\"".into(),
                ));
            }
            if config.local.is_some() {
                return Err(invalid(
                    "pmem_dir and local both serve the heap (files, or emulated far memory): give one of them".into(),
                ));
            }
        } else if config.keep_backing {
            return Err(invalid("keep_backing needs pmem_dir".into()));
        }
        let records = config.allocs
            || config.local.is_some()
            || config.max_mb.is_some()
            || config.policy.is_some()
            || config.access_samples.is_some();
        if mode != Mode::Record && records {
            return Err(invalid(
                "allocs, local, max_mb, policy and access_samples are options of mode = \"record\""
                    .into(),
            ));
        }
        if config.local.is_none() && (config.max_mb.is_some() || config.policy.is_some()) {
            return Err(invalid(
                "max_mb and policy belong to far-memory emulation: give local too".into(),
            ));
        }
        if let (Some(LocalMemory::Mb(l)), Some(m)) = (config.local, config.max_mb)
            && l > m
        {
            return Err(invalid(format!("local ({l} MiB) exceeds max_mb ({m} MiB)")));
        }
        if matches!(config.local, Some(LocalMemory::OfDryPeak(_)))
            && !configs.iter().any(|c| c.mode == Mode::Dry)
        {
            return Err(invalid(
                "local is a fraction of the dry peak: a configuration with mode = \"dry\" must come before it".into(),
            ));
        }
        configs.push(config);
    }
    Ok(configs)
}

fn fraction(f: f64) -> Result<f64, String> {
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err(format!(
            "local as a fraction of the dry peak must be in (0, 1] (or 1% to 100%), not {f}"
        ))
    }
}

/// Names become directory names and partition values (`config=NAME`): letters, digits, `.`,
/// `_` and `-` only, not starting with a dot.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name `{name}`: use 1 to 100 letters, digits, `.`, `_` or `-`, not starting with `.`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a dry run whose heap is backed by files preloads the library itself.
    #[test]
    fn preload_is_needed_for_dry_runs_with_a_backing_directory() {
        assert!(!preload_needed(&defaults()));
        let mut pmem_record = Config::new("pmem-record", Mode::Record);
        pmem_record.pmem_dir = Some(PathBuf::from("/mnt/pmem"));
        assert!(!preload_needed(&[pmem_record.clone()]));
        let mut pmem_dry = Config::new("pmem-dry", Mode::Dry);
        pmem_dry.pmem_dir = Some(PathBuf::from("/mnt/pmem"));
        assert!(preload_needed(&[pmem_record, pmem_dry]));
        assert!(!preload_needed(&[]));
    }

    #[test]
    fn full_configuration_parses() {
        let configs = parse(
            r#"
            [[config]]
            name = "dry"
            mode = "dry"
            mem_node = 0
            cpu_node = 0

            [[config]]
            name = "half"
            allocs = true
            local = "50%"
            policy = "clock"
            access_samples = 2000

            [[config]]
            name = "fixed"
            local = 64
            max_mb = 512

            [[config]]
            name = "quarter"
            local = 0.25

            [[config]]
            name = "w"
            mode = "wss"

            [[config]]
            name = "pmem"
            mode = "dry"
            pmem_dir = "/mnt/pmem"
            keep_backing = true
            "#,
        )
        .unwrap();
        assert_eq!(configs.len(), 6);
        assert_eq!(configs[5].pmem_dir.as_deref(), Some(Path::new("/mnt/pmem")));
        assert!(configs[5].keep_backing);
        assert_eq!(configs[1].pmem_dir, None);
        assert_eq!(configs[0].mode, Mode::Dry);
        assert_eq!(
            (configs[0].mem_node, configs[0].cpu_node),
            (Some(0), Some(0))
        );
        assert_eq!(configs[1].mode, Mode::Record);
        assert_eq!(configs[1].local, Some(LocalMemory::OfDryPeak(0.5)));
        assert_eq!(configs[1].policy, Some(EvictionPolicy::Clock));
        assert_eq!(configs[2].policy, None);
        assert_eq!(
            configs[1].record_flags(),
            [
                "--allocs",
                "--policy",
                "clock",
                "--access-samples",
                "--freq",
                "2000"
            ]
        );
        assert_eq!(configs[2].local, Some(LocalMemory::Mb(64)));
        assert_eq!(configs[2].max_mb, Some(512));
        assert_eq!(configs[3].local, Some(LocalMemory::OfDryPeak(0.25)));
        assert_eq!(configs[4].mode, Mode::Wss);
    }

    fn refusal(text: &str) -> String {
        match parse(text) {
            Err(ParseError::Invalid(m)) => m,
            Err(ParseError::Syntax(e)) => format!("syntax: {e}"),
            Ok(c) => panic!("accepted: {c:?}"),
        }
    }

    #[test]
    fn invalid_configurations_are_refused_with_reasons() {
        assert!(
            refusal("[[config]]\nname = \"a\"\npmem_dir = \"/mnt/pmem\"\nlocal = 10")
                .contains("both serve the heap")
        );
        assert!(refusal("[[config]]\nname = \"a\"\npmem_dir = \"pmem\"").contains("absolute"));
        assert!(
            refusal("[[config]]\nname = \"a\"\nmode = \"wss\"\npmem_dir = \"/mnt/pmem\"")
                .contains("dry")
        );
        assert!(
            refusal("[[config]]\nname = \"a\"\nkeep_backing = true").contains("needs pmem_dir")
        );
        assert!(refusal("[[config]]\nname = \"a\"\nlocal = \"50%\"").contains("must come before"));
        assert!(refusal("[[config]]\nname = \"a/b\"").contains("name `a/b`"));
        assert!(refusal("[[config]]\nname = \"a\"\n[[config]]\nname = \"a\"").contains("twice"));
        assert!(refusal("[[config]]\nname = \"a\"\nlocal = 1.5").contains("(0, 1]"));
        assert!(refusal("[[config]]\nname = \"a\"\nlocal = \"lots\"").contains("neither MB"));
        assert!(
            refusal("[[config]]\nname = \"a\"\nmode = \"dry\"\nallocs = true")
                .contains("options of mode")
        );
        assert!(
            refusal("[[config]]\nname = \"a\"\npolicy = \"lru\"")
                .contains("policy `lru` is not one of fifo, clock, refault")
        );
        assert!(refusal("[[config]]\nname = \"a\"\nlocal = 100\nmax_mb = 50").contains("exceeds"));
        assert!(refusal("[[config]]\nname = \"a\"\nallcs = true").starts_with("syntax"));
        assert!(refusal("").contains("no configuration"));
    }

    /// A series file keeps the policy by its name, and reads it back.
    #[test]
    fn policy_is_written_and_read_by_its_name() {
        let mut config = Config::new("c", Mode::Record);
        config.policy = Some(EvictionPolicy::Refault);
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""policy":"refault""#), "{json}");
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
        let dry = serde_json::to_string(&Config::new("d", Mode::Dry)).unwrap();
        assert!(dry.contains(r#""policy":null"#), "{dry}");
        let without = dry.replace(r#""policy":null,"#, "");
        assert_eq!(
            serde_json::from_str::<Config>(&without).unwrap(),
            Config::new("d", Mode::Dry)
        );
    }

    #[test]
    fn defaults_are_dry_then_record() {
        let d = defaults();
        assert_eq!(
            d.iter()
                .map(|c| (c.name.as_str(), c.mode))
                .collect::<Vec<_>>(),
            [("dry", Mode::Dry), ("record", Mode::Record)]
        );
    }
}
