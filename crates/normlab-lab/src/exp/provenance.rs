//! Where and when results were produced: the machine and the date each
//! result.json records, and the findings' paragraph naming experiments that
//! ran on another machine than the book's latest session.

/// What this machine is, for the record.
pub fn machine() -> String {
    let mem = normlab::limits::available_memory()
        .map(|b| {
            format!(
                ", {} available memory",
                normlab::limits::human_bytes(b as f64)
            )
        })
        .unwrap_or_default();
    format!("{}{mem}", processor())
}

/// The processor and core count (each result.json records it: timings
/// depend on it, nothing else does, since every SIMD level gives the same
/// bits).
pub fn processor() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpu}, {cores} cores")
}

/// The date (UTC) from the system clock, as YYYY-MM-DD.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A paragraph naming the experiments whose recorded results ran on
/// another processor than this one (or do not say where), grouped by
/// processor and date; empty when there are none. `ran_on` gives, per
/// experiment id, the (processor, date) its result records.
pub(crate) fn other_machines<'a>(
    ran_on: impl IntoIterator<Item = (&'a str, Option<&'a (String, String)>)>,
) -> String {
    let (here, date) = (processor(), today());
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (id, ran) in ran_on {
        let key = match ran {
            Some((m, d)) if *m == here && *d == date => continue,
            Some((m, date)) => format!("{m} ({date})"),
            None => "a machine they do not record".to_string(),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ids)) => ids.push(id),
            None => groups.push((key, vec![id])),
        }
    }
    if groups.is_empty() {
        return String::new();
    }
    let list: Vec<String> = groups
        .iter()
        .map(|(k, ids)| format!("{} on {k}", ids.join(", ")))
        .collect();
    format!(
        "Not every experiment ran on this machine today: {}. Only their timings depend on the machine (every SIMD level gives the same bits).\n\n",
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_name_the_experiments_that_ran_on_other_machines() {
        let here = processor();
        let (mine, other) = (
            (here.clone(), today()),
            (
                "Elsewhere CPU, 2 cores".to_string(),
                "2026-11-30".to_string(),
            ),
        );
        assert_eq!(other_machines([("drift", Some(&mine))]), "");
        let text = other_machines([
            ("drift", Some(&mine)),
            ("speed", Some(&other)),
            ("collapse", Some(&other)),
            ("warmup", None),
        ]);
        assert!(
            text.contains("speed, collapse on Elsewhere CPU, 2 cores (2026-11-30)"),
            "{text}"
        );
        assert!(
            text.contains("warmup on a machine they do not record"),
            "{text}"
        );
        assert!(!text.contains("drift"), "{text}");
        // This machine on another day is another run.
        let before = (here.clone(), "2020-01-01".to_string());
        let text = other_machines([("drift", Some(&before))]);
        assert!(text.contains("drift on "), "{text}");
        assert!(text.contains("(2020-01-01)"), "{text}");
    }
}
