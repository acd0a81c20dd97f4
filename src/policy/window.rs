//! Maintenance-window math (§3.1): the union of a policy's window entries as concrete
//! UTC occurrences, DST resolution, merged occurrences, and the worst-case period `P`.
//!
//! Each entry is a weekly rule in one IANA zone: on each listed day, from `start` to `end` local
//! time; `end <= start` runs past midnight into the next day and `start == end` is a full 24h
//! occurrence. Local times are resolved to instants with the tz database:
//!
//! - a time in a spring-forward gap moves to the first instant after the gap;
//! - an ambiguous time (fall-back) takes the earlier instant;
//! - if both ends of one occurrence fall into the same gap, the occurrence keeps its wall-clock
//!   length from the first instant after the gap, so that it never vanishes
//!   (`docs/decisions/policy-windows.md`).
//!
//! The union merges occurrences that touch or overlap. "Occurrence" below always means a merged
//! run of the union unless it says "entry occurrence". Everything here is pure: callers pass the
//! instant they care about.
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Timelike, Utc,
    Weekday,
};
use chrono_tz::Tz;

use super::crd::MaintenanceWindow;

/// How far [`Schedule::period`] looks ahead: 53 weeks, so both DST transitions of a year are in
/// every measurement (§3.1). Also the limit on how far an occurrence's bounds are
/// traced back or forward; a union open longer than that is reported clipped to it.
pub(crate) const HORIZON: Duration = Duration::weeks(53);

/// `P` of a continuously open (24/7) union: the reconcile tick (§3.1).
pub(crate) const ALWAYS_OPEN_PERIOD: Duration = Duration::minutes(1);

/// An entry occurrence lasts at most 25h (a 24h local window over a fall-back night); this margin
/// bounds how far before a range an entry occurrence that still reaches into it can start.
const MAX_ENTRY_OCCURRENCE: Duration = Duration::hours(27);

/// The day names the schema admits, in `chrono` order.
pub(crate) const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// One concrete occurrence: rotation starts are allowed in `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Occurrence {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Occurrence {
    /// Whether `t` lies in `[start, end)`.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start <= t && t < self.end
    }

    /// Elapsed length.
    pub(crate) fn duration(&self) -> Duration {
        self.end - self.start
    }
}

/// An occurrence of a single entry on one local date (before the union is merged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryOccurrence {
    /// Index of the entry in `spec.maintenanceWindows`.
    pub entry: usize,
    /// The local date the occurrence starts on (the listed day).
    pub date: NaiveDate,
    pub occurrence: Occurrence,
}

/// A window entry that does not compile; `field` is the path under `spec`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct WindowError {
    pub field: String,
    pub problem: String,
}

/// One compiled `spec.maintenanceWindows[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WindowEntry {
    pub timezone: Tz,
    /// Listed days, Monday first.
    pub days: [bool; 7],
    pub start: NaiveTime,
    pub end: NaiveTime,
}

impl WindowEntry {
    fn has_day(&self, day: Weekday) -> bool {
        self.days[day.num_days_from_monday() as usize]
    }

    /// The entry's occurrence starting on local `date` (whether or not `date` is a listed day).
    fn occurrence_on(&self, date: NaiveDate) -> Occurrence {
        let start_local = date.and_time(self.start);
        let end_date = if self.end <= self.start { date.succ_opt().unwrap_or(date) } else { date };
        let end_local = end_date.and_time(self.end);
        let start = resolve_local(self.timezone, start_local);
        let mut end = resolve_local(self.timezone, end_local);
        if end <= start {
            // Both ends in one spring-forward gap: keep the wall-clock length (module docs).
            end = start + (end_local - start_local);
        }
        Occurrence { start, end }
    }
}

impl fmt::Display for WindowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days: Vec<&str> =
            DAY_NAMES.iter().zip(self.days).filter(|(_, on)| *on).map(|(name, _)| *name).collect();
        let kind = match self.end.cmp(&self.start) {
            std::cmp::Ordering::Equal => " (24h)",
            std::cmp::Ordering::Less => " (overnight)",
            std::cmp::Ordering::Greater => "",
        };
        write!(
            f,
            "{} {} {}-{}{kind}",
            self.timezone.name(),
            days.join(","),
            self.start.format("%H:%M"),
            self.end.format("%H:%M")
        )
    }
}

/// Resolves a local wall-clock time to an instant with the rules of §3.1: a gap moves
/// to the first instant after it, an ambiguous time takes the earlier instant.
pub(crate) fn resolve_local(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    let mut probe = local;
    // Gaps are whole minutes in every zone of the current tz database and at most a day long
    // (Samoa, 2011); step to the first wall-clock minute that exists. Its instant is the end of
    // the gap.
    for _ in 0..=(26 * 60) {
        if let Some(t) = tz.from_local_datetime(&probe).earliest() {
            return t.with_timezone(&Utc);
        }
        probe += Duration::minutes(1);
    }
    // Unreachable with a real tz database; fall back to the zone's standard offset.
    let offset = tz.offset_from_utc_datetime(&local);
    local.and_utc() - Duration::seconds(i64::from(chrono::Offset::fix(&offset).local_minus_utc()))
}

/// Parses `HH:MM` (00:00–23:59).
pub(crate) fn parse_hhmm(s: &str) -> Option<NaiveTime> {
    let bytes = s.as_bytes();
    if bytes.len() != 5 || bytes[2] != b':' {
        return None;
    }
    if !bytes.iter().enumerate().all(|(i, b)| i == 2 || b.is_ascii_digit()) {
        return None;
    }
    let hours: u32 = s[..2].parse().ok()?;
    let minutes: u32 = s[3..].parse().ok()?;
    NaiveTime::from_hms_opt(hours, minutes, 0).filter(|_| hours < 24 && minutes < 60)
}

/// Parses a schema day name (`Mon` … `Sun`, exactly).
pub(crate) fn parse_day(s: &str) -> Option<Weekday> {
    DAY_NAMES.iter().position(|d| *d == s).and_then(|i| Weekday::try_from(i as u8).ok())
}

/// The compiled union of a policy's maintenance windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    entries: Vec<WindowEntry>,
    always_open: bool,
}

/// What [`Schedule::profile`] measures over the horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowProfile {
    /// `P`: the largest elapsed time from one occurrence start to the next.
    pub period: Duration,
    /// The union is open over the whole horizon (24/7): `period` is the 1m tick.
    pub always_open: bool,
    /// The shortest occurrence (`D` for `C`), `None` when always open.
    pub shortest_occurrence: Option<Duration>,
    /// The shortest closed gap between two occurrences, `None` when always open.
    pub shortest_gap: Option<Duration>,
}

impl Schedule {
    /// Compiles `spec.maintenanceWindows`. Every problem is reported, each naming its field
    /// (`maintenanceWindows[1].timezone`, …). An empty list compiles to an empty schedule: that is
    /// the layer-1 fatal finding `NoWindows`, not a validation error.
    pub fn new(windows: &[MaintenanceWindow]) -> Result<Schedule, Vec<WindowError>> {
        let mut errors = Vec::new();
        let mut entries = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let field = |name: &str| format!("maintenanceWindows[{i}].{name}");
            let timezone = match Tz::from_str(&w.timezone) {
                Ok(tz) => Some(tz),
                Err(_) => {
                    errors.push(WindowError {
                        field: field("timezone"),
                        problem: format!(
                            "unknown IANA time zone {:?} (use a tz database name such as \
                             \"Asia/Tokyo\" or \"UTC\")",
                            w.timezone
                        ),
                    });
                    None
                }
            };
            let mut days = [false; 7];
            if w.days.is_empty() {
                errors.push(WindowError {
                    field: field("days"),
                    problem: "must list at least one day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)"
                        .to_string(),
                });
            }
            let mut seen = BTreeSet::new();
            for (j, day) in w.days.iter().enumerate() {
                match parse_day(day) {
                    Some(d) if seen.insert(d.num_days_from_monday()) => {
                        days[d.num_days_from_monday() as usize] = true;
                    }
                    Some(_) => errors.push(WindowError {
                        field: format!("maintenanceWindows[{i}].days[{j}]"),
                        problem: format!("duplicate day {day:?}"),
                    }),
                    None => errors.push(WindowError {
                        field: format!("maintenanceWindows[{i}].days[{j}]"),
                        problem: format!(
                            "unknown day {day:?} (use Mon, Tue, Wed, Thu, Fri, Sat or Sun)"
                        ),
                    }),
                }
            }
            let mut time = |name: &str, value: &str| {
                let parsed = parse_hhmm(value);
                if parsed.is_none() {
                    errors.push(WindowError {
                        field: field(name),
                        problem: format!("{value:?} is not a 24-hour HH:MM time (00:00-23:59)"),
                    });
                }
                parsed
            };
            let start = time("start", &w.start);
            let end = time("end", &w.end);
            if let (Some(timezone), Some(start), Some(end)) = (timezone, start, end) {
                entries.push(WindowEntry { timezone, days, start, end });
            }
        }
        if errors.is_empty() { Ok(Schedule::from_entries(entries)) } else { Err(errors) }
    }

    /// A schedule from already compiled entries.
    pub(crate) fn from_entries(entries: Vec<WindowEntry>) -> Schedule {
        let always_open = covers_whole_week(&entries);
        Schedule { entries, always_open }
    }

    /// The compiled entries, in spec order.
    pub(crate) fn entries(&self) -> &[WindowEntry] {
        &self.entries
    }

    /// No entries: `P` is undefined (fatal `NoWindows`) and the window is never open.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The union covers every instant (one zone's entries cover the whole local week).
    pub(crate) fn is_always_open(&self) -> bool {
        self.always_open
    }

    /// The union has windows and time outside them, so its occurrences start and end: what the
    /// burst lookahead's open time and `ageThreshold: windows` count on. Otherwise (no windows,
    /// or open 24/7) open time is wall time and `windows` is `auto`.
    pub(crate) fn has_gaps(&self) -> bool {
        !self.is_empty() && !self.always_open
    }

    /// The distinct zones of the entries, in first-use order.
    pub(crate) fn timezones(&self) -> Vec<Tz> {
        let mut out: Vec<Tz> = Vec::new();
        for e in &self.entries {
            if !out.contains(&e.timezone) {
                out.push(e.timezone);
            }
        }
        out
    }

    /// Whether the window is open at `t` (rotation starts allowed).
    pub fn in_window(&self, t: DateTime<Utc>) -> bool {
        if self.always_open {
            return true;
        }
        self.entry_occurrences(t - MAX_ENTRY_OCCURRENCE, t + Duration::seconds(1))
            .iter()
            .any(|o| o.occurrence.contains(t))
    }

    /// The merged occurrence that contains `t`, if the window is open at `t`.
    pub(crate) fn occurrence_containing(&self, t: DateTime<Utc>) -> Option<Occurrence> {
        if !self.in_window(t) {
            return None;
        }
        self.runs(t, t + Duration::nanoseconds(1)).into_iter().find(|o| o.contains(t))
    }

    /// The first occurrence start strictly after `t`. `None` when the union never starts again
    /// within the horizon (no entries, or open without a break).
    pub(crate) fn next_start_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.entries.is_empty() || self.always_open {
            return None;
        }
        // A weekly rule starts again within 8 days unless the union stays open longer.
        for reach in [Duration::days(8), HORIZON] {
            let next = self.runs(t, t + reach).into_iter().map(|o| o.start).find(|s| *s > t);
            if next.is_some() {
                return next;
            }
        }
        None
    }

    /// The occurrence open at `now`, or the next one. `None` without windows, or when open 24/7
    /// (no occurrence bounds). The answer holds from `now` until the occurrence's end: the
    /// occurrences are merged, so none that ends later can start before it.
    pub(crate) fn current_or_next(&self, now: DateTime<Utc>) -> Option<Occurrence> {
        if self.is_empty() || self.is_always_open() {
            return None;
        }
        let mut reach = Duration::days(8);
        loop {
            if let Some(o) = self.occurrences(now, now + reach).into_iter().find(|o| o.end > now) {
                return Some(o);
            }
            if reach >= HORIZON {
                return None;
            }
            reach = (reach * 8).min(HORIZON);
        }
    }

    /// The merged occurrences that intersect `[from, to)`, in order. Their bounds are exact
    /// (traced outside the range as far as the union stays open, up to [`HORIZON`]).
    pub(crate) fn occurrences(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Occurrence> {
        if to <= from {
            return Vec::new();
        }
        self.runs(from, to)
    }

    /// `P` measured from `from` (§3.1): the largest elapsed time between consecutive
    /// occurrence starts over the next 53 weeks, including the gap that spans `from`. 24/7 union:
    /// the 1m tick. `None` without entries.
    pub(crate) fn period(&self, from: DateTime<Utc>) -> Option<Duration> {
        self.profile(from).map(|p| p.period)
    }

    /// `P` together with the shortest occurrence and the shortest gap over the same horizon.
    pub(crate) fn profile(&self, from: DateTime<Utc>) -> Option<WindowProfile> {
        if self.entries.is_empty() {
            return None;
        }
        let always_open = WindowProfile {
            period: ALWAYS_OPEN_PERIOD,
            always_open: true,
            shortest_occurrence: None,
            shortest_gap: None,
        };
        if self.always_open {
            return Some(always_open);
        }
        let horizon_end = from + HORIZON;
        let runs = self.runs(from - Duration::days(8), horizon_end);
        if runs.iter().any(|r| r.start <= from && r.end >= horizon_end) {
            return Some(always_open);
        }
        // The gap spanning `from` starts at the last start at or before `from`.
        let first = runs.iter().rposition(|r| r.start <= from).unwrap_or(0);
        let relevant = &runs[first..];
        let mut period = Duration::zero();
        let mut shortest_gap: Option<Duration> = None;
        for pair in relevant.windows(2) {
            period = period.max(pair[1].start - pair[0].start);
            let gap = pair[1].start - pair[0].end;
            shortest_gap = Some(shortest_gap.map_or(gap, |g| g.min(gap)));
        }
        if relevant.len() < 2 {
            // A single start in 53 weeks: the union is open almost all the time but breaks once
            // (zones mixed across DST seasons). Report the horizon: conservative, see
            // docs/decisions/policy-windows.md.
            period = HORIZON;
        }
        let shortest_occurrence =
            relevant.iter().filter(|r| r.start < horizon_end).map(Occurrence::duration).min();
        Some(WindowProfile { period, always_open: false, shortest_occurrence, shortest_gap })
    }

    /// Entry occurrences (unmerged) that start in `[from, to)`, in start order. Each listed local
    /// date yields exactly one, with positive length.
    pub(crate) fn entry_occurrences(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<EntryOccurrence> {
        let mut out = Vec::new();
        if to <= from {
            return out;
        }
        for (index, entry) in self.entries.iter().enumerate() {
            // A local date's occurrence starts no earlier than its midnight minus the largest
            // UTC offset (+14h) and no later than its end plus the smallest (−12h); two days of
            // slack on each side covers both.
            let first = (from - Duration::days(2)).with_timezone(&entry.timezone).date_naive();
            let last = (to + Duration::days(2)).with_timezone(&entry.timezone).date_naive();
            for date in first.iter_days().take_while(|d| *d <= last) {
                if !entry.has_day(date.weekday()) {
                    continue;
                }
                let occurrence = entry.occurrence_on(date);
                if occurrence.start >= from && occurrence.start < to {
                    out.push(EntryOccurrence { entry: index, date, occurrence });
                }
            }
        }
        out.sort_by_key(|o| (o.occurrence.start, o.occurrence.end, o.entry));
        out
    }

    /// Merged runs intersecting `[from, to)` with exact bounds up to [`HORIZON`] outside it.
    fn runs(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Occurrence> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        let cap_lo = from - HORIZON;
        let cap_hi = to + HORIZON;
        if self.always_open {
            return vec![Occurrence { start: cap_lo, end: cap_hi }];
        }
        let mut lo = from - MAX_ENTRY_OCCURRENCE;
        let mut hi = to;
        let mut step = Duration::days(8);
        loop {
            let runs = merge(self.entry_occurrences(lo, hi).into_iter().map(|o| o.occurrence));
            // An entry occurrence starting before `lo` ends before `lo + MAX_ENTRY_OCCURRENCE`;
            // it can still reach (and bridge earlier runs into) the first run that matters if
            // that run begins before then.
            let extend_lo = lo > cap_lo
                && runs
                    .iter()
                    .find(|r| r.end > from)
                    .is_some_and(|r| r.start < lo + MAX_ENTRY_OCCURRENCE);
            // One starting at or after `hi` joins the last run if that run reaches `hi`.
            let extend_hi = hi < cap_hi && runs.last().is_some_and(|r| r.end >= hi && r.start < to);
            if !extend_lo && !extend_hi {
                return runs
                    .into_iter()
                    .filter(|r| r.end > from && r.start < to)
                    .map(|r| Occurrence { start: r.start.max(cap_lo), end: r.end.min(cap_hi) })
                    .collect();
            }
            if extend_lo {
                lo = (lo - step).max(cap_lo);
            }
            if extend_hi {
                hi = (hi + step).min(cap_hi);
            }
            step = step * 2;
        }
    }
}

/// Merges occurrences that touch or overlap. The input need not be sorted.
pub(crate) fn merge(occurrences: impl IntoIterator<Item = Occurrence>) -> Vec<Occurrence> {
    let mut all: Vec<Occurrence> = occurrences.into_iter().collect();
    all.sort();
    let mut out: Vec<Occurrence> = Vec::with_capacity(all.len());
    for o in all {
        match out.last_mut() {
            Some(last) if o.start <= last.end => last.end = last.end.max(o.end),
            _ => out.push(o),
        }
    }
    out
}

/// Whether the entries of any one zone cover the whole local week. Such a union is open at every
/// instant whatever the DST rules do, because adjacent occurrences share their boundary's local
/// time and therefore its resolved instant.
fn covers_whole_week(entries: &[WindowEntry]) -> bool {
    const WEEK: usize = 7 * 24 * 60;
    let mut zones: Vec<Tz> = entries.iter().map(|e| e.timezone).collect();
    zones.dedup();
    zones.into_iter().any(|tz| {
        let mut covered = vec![false; WEEK];
        for e in entries.iter().filter(|e| e.timezone == tz) {
            let start = (e.start.hour() * 60 + e.start.minute()) as usize;
            let end = (e.end.hour() * 60 + e.end.minute()) as usize;
            let len = if end > start { end - start } else { 24 * 60 - start + end };
            for (day, on) in e.days.iter().enumerate() {
                if *on {
                    for m in 0..len {
                        covered[(day * 24 * 60 + start + m) % WEEK] = true;
                    }
                }
            }
        }
        covered.iter().all(|c| *c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn window(tz: &str, days: &[&str], start: &str, end: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            timezone: tz.to_string(),
            days: days.iter().map(|d| d.to_string()).collect(),
            start: start.to_string(),
            end: end.to_string(),
        }
    }

    fn schedule(windows: &[MaintenanceWindow]) -> Schedule {
        Schedule::new(windows).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).single().unwrap_or_else(|| panic!("bad date"))
    }

    fn local(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        tz.with_ymd_and_hms(y, mo, d, h, mi, 0)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|| panic!("no local time"))
    }

    #[test]
    fn worked_example_period_is_four_days() {
        let s = schedule(&[window("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        // Any reference instant: Tokyo has no DST, the gaps are Sat->Wed 4d and Wed->Sat 3d.
        assert_eq!(s.period(utc(2026, 3, 1, 0, 0)), Some(Duration::days(4)));
        let p = s.profile(utc(2026, 7, 15, 12, 0)).unwrap_or_else(|| panic!("profile"));
        assert_eq!(p.period, Duration::days(4));
        assert_eq!(p.shortest_occurrence, Some(Duration::hours(4)));
        assert_eq!(p.shortest_gap, Some(Duration::days(3) - Duration::hours(4)));
        let weekly = schedule(&[window("Asia/Tokyo", &["Sat"], "02:00", "06:00")]);
        assert_eq!(weekly.period(utc(2026, 3, 1, 0, 0)), Some(Duration::days(7)));
    }

    #[test]
    fn errors_name_the_field() {
        let err = Schedule::new(&[
            window("Asia/Tokyo", &["Wed"], "02:00", "06:00"),
            window("Asia/Tokio", &[], "2:00", "24:00"),
        ])
        .err()
        .unwrap_or_default();
        let fields: Vec<&str> = err.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "maintenanceWindows[1].timezone",
                "maintenanceWindows[1].days",
                "maintenanceWindows[1].start",
                "maintenanceWindows[1].end"
            ]
        );
        let err = Schedule::new(&[window("UTC", &["Wed", "wed", "Wed"], "02:00", "06:00")])
            .err()
            .unwrap_or_default();
        assert_eq!(err.len(), 2);
        assert_eq!(err[0].field, "maintenanceWindows[0].days[1]");
        assert!(err[0].problem.contains("unknown day"));
        assert_eq!(err[1].field, "maintenanceWindows[0].days[2]");
        assert!(err[1].problem.contains("duplicate"));
    }

    #[test]
    fn hhmm() {
        assert_eq!(parse_hhmm("00:00"), NaiveTime::from_hms_opt(0, 0, 0));
        assert_eq!(parse_hhmm("23:59"), NaiveTime::from_hms_opt(23, 59, 0));
        for bad in ["24:00", "2:00", "02:60", "0200", "02:00:00", "ab:cd", " 2:00", "+1:00"] {
            assert_eq!(parse_hhmm(bad), None, "{bad}");
        }
    }

    #[test]
    fn overnight_window_spans_midnight() {
        let tz = chrono_tz::Europe::Berlin;
        let s = schedule(&[window("Europe/Berlin", &["Fri"], "22:00", "03:00")]);
        let occ = s.occurrence_containing(local(tz, 2026, 6, 6, 1, 0));
        assert_eq!(
            occ,
            Some(Occurrence {
                start: local(tz, 2026, 6, 5, 22, 0),
                end: local(tz, 2026, 6, 6, 3, 0)
            })
        );
        assert!(!s.in_window(local(tz, 2026, 6, 6, 3, 0)));
        assert!(!s.in_window(local(tz, 2026, 6, 5, 21, 59)));
    }

    #[test]
    fn full_day_window_and_24_7() {
        let s = schedule(&[window("UTC", &["Mon"], "00:00", "00:00")]);
        assert_eq!(
            s.occurrence_containing(utc(2026, 6, 1, 12, 0)),
            Some(Occurrence { start: utc(2026, 6, 1, 0, 0), end: utc(2026, 6, 2, 0, 0) })
        );
        let all = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let open = schedule(&[window("America/New_York", &all, "06:00", "06:00")]);
        assert!(open.is_always_open());
        assert_eq!(open.period(utc(2026, 3, 8, 0, 0)), Some(ALWAYS_OPEN_PERIOD));
        assert_eq!(open.next_start_after(utc(2026, 3, 8, 0, 0)), None);
        // Two entries that only together cover the week are still 24/7.
        let split = schedule(&[
            window("Europe/London", &all, "00:00", "12:00"),
            window("Europe/London", &all, "12:00", "00:00"),
        ]);
        assert!(split.is_always_open());
        // Open through the week except one minute: not 24/7.
        let almost = schedule(&[window("UTC", &all, "00:01", "00:00")]);
        assert!(!almost.is_always_open());
        assert_eq!(almost.period(utc(2026, 1, 1, 0, 0)), Some(Duration::days(1)));
    }

    #[test]
    fn union_merges_touching_and_overlapping_entries() {
        let s = schedule(&[
            window("UTC", &["Sat"], "02:00", "04:00"),
            window("UTC", &["Sat"], "04:00", "06:00"),
            window("UTC", &["Sat"], "05:00", "08:00"),
            window("Asia/Tokyo", &["Sat"], "19:00", "20:00"), // 10:00-11:00 UTC, separate
        ]);
        let occ = s.occurrences(utc(2026, 6, 6, 0, 0), utc(2026, 6, 7, 0, 0));
        assert_eq!(
            occ,
            vec![
                Occurrence { start: utc(2026, 6, 6, 2, 0), end: utc(2026, 6, 6, 8, 0) },
                Occurrence { start: utc(2026, 6, 6, 10, 0), end: utc(2026, 6, 6, 11, 0) },
            ]
        );
        assert_eq!(s.next_start_after(utc(2026, 6, 6, 2, 0)), Some(utc(2026, 6, 6, 10, 0)));
        assert_eq!(s.next_start_after(utc(2026, 6, 6, 1, 59)), Some(utc(2026, 6, 6, 2, 0)));
    }

    #[test]
    fn spring_forward_gap_moves_to_first_instant_after_it() {
        let ny = chrono_tz::America::New_York;
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
        let s = schedule(&[window("America/New_York", &["Sun"], "02:30", "05:00")]);
        let occ = s.occurrence_containing(utc(2026, 3, 8, 7, 30));
        assert_eq!(
            occ,
            Some(Occurrence { start: utc(2026, 3, 8, 7, 0), end: local(ny, 2026, 3, 8, 5, 0) })
        );
        // Entirely inside the gap: keeps its 30 wall-clock minutes from 03:00 EDT.
        let s = schedule(&[window("America/New_York", &["Sun"], "02:00", "02:30")]);
        let occ = s.entry_occurrences(utc(2026, 3, 8, 0, 0), utc(2026, 3, 9, 0, 0));
        assert_eq!(occ.len(), 1);
        assert_eq!(
            occ[0].occurrence,
            Occurrence { start: utc(2026, 3, 8, 7, 0), end: utc(2026, 3, 8, 7, 30) }
        );
        // Lord Howe's 30-minute shift: 2026-10-04 02:00 -> 02:30 local.
        let s = schedule(&[window("Australia/Lord_Howe", &["Sun"], "02:10", "02:20")]);
        let occ = s.entry_occurrences(utc(2026, 10, 3, 0, 0), utc(2026, 10, 5, 0, 0));
        assert_eq!(occ.len(), 1);
        let lh = chrono_tz::Australia::Lord_Howe;
        assert_eq!(occ[0].occurrence.start, local(lh, 2026, 10, 4, 2, 30));
        assert_eq!(occ[0].occurrence.duration(), Duration::minutes(10));
    }

    #[test]
    fn fall_back_ambiguity_takes_the_earlier_instant() {
        // 2026-11-01: 01:00-02:00 happens twice in New York (EDT, then EST).
        let s = schedule(&[window("America/New_York", &["Sun"], "01:30", "01:45")]);
        let occ = s.entry_occurrences(utc(2026, 11, 1, 0, 0), utc(2026, 11, 2, 0, 0));
        assert_eq!(occ.len(), 1);
        assert_eq!(
            occ[0].occurrence,
            Occurrence { start: utc(2026, 11, 1, 5, 30), end: utc(2026, 11, 1, 5, 45) }
        );
        // A 24h local window over the fall-back night lasts 25h.
        let s = schedule(&[window("America/New_York", &["Sat"], "12:00", "12:00")]);
        let occ = s.entry_occurrences(utc(2026, 10, 31, 0, 0), utc(2026, 11, 1, 0, 0));
        assert_eq!(occ[0].occurrence.duration(), Duration::hours(25));
    }

    #[test]
    fn dst_week_stretches_the_period_by_the_shift() {
        // Daily at 01:30 London: the gap across the spring-forward night is 23h, across the
        // fall-back night 25h. P over 53 weeks includes the longer one.
        let all = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let s = schedule(&[window("Europe/London", &all, "01:30", "02:30")]);
        assert_eq!(s.period(utc(2026, 1, 10, 0, 0)), Some(Duration::hours(25)));
        let weekly = schedule(&[window("America/New_York", &["Sat"], "23:00", "01:00")]);
        assert_eq!(
            weekly.period(utc(2026, 1, 10, 0, 0)),
            Some(Duration::days(7) + Duration::hours(1))
        );
    }

    #[test]
    fn seasonal_mixed_zone_union_is_reported_conservatively() {
        // UTC 00:00-12:00 plus New York 07:00-19:00: closed 23:00-24:00 UTC only in summer.
        let all = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let s = schedule(&[
            window("UTC", &all, "00:00", "12:00"),
            window("America/New_York", &all, "07:00", "19:00"),
        ]);
        assert!(!s.is_always_open());
        let winter = utc(2026, 1, 10, 12, 0);
        let occ = s.occurrence_containing(winter).unwrap_or_else(|| panic!("open in winter"));
        // The winter run ends with the first summer break (2026-03-08 at 23:00 UTC).
        assert_eq!(occ.end, utc(2026, 3, 8, 23, 0));
        assert_eq!(s.next_start_after(winter), Some(utc(2026, 3, 9, 0, 0)));
        let p = s.period(winter).unwrap_or_default();
        assert!(p > Duration::days(30), "{p:?}");
    }

    #[test]
    fn an_entry_occurrence_before_the_lookback_still_bridges_runs() {
        // Found by window_props: New York's Monday 24h occurrence (Mon 10:30Z - Tue 10:30Z)
        // starts before the lookback of a Tuesday-afternoon query, overlaps Chatham's Tuesday
        // window (Mon 15:00Z - Tue 10:15Z) and touches New York's Tuesday occurrence.
        let s = schedule(&[
            window("America/New_York", &["Mon", "Tue"], "05:30", "05:30"),
            window("Pacific/Chatham", &["Tue"], "04:45", "00:00"),
        ]);
        assert_eq!(
            s.occurrence_containing(utc(2026, 3, 3, 15, 26)),
            Some(Occurrence { start: utc(2026, 3, 2, 10, 30), end: utc(2026, 3, 4, 10, 30) })
        );
    }

    #[test]
    fn zones_that_only_together_cover_the_week_are_open_all_horizon() {
        // Found by window_props: Lord Howe Thu-Sat plus Kolkata Sat-Wed, each full days.
        let s = schedule(&[
            window("Australia/Lord_Howe", &["Thu", "Fri", "Sat"], "00:00", "00:00"),
            window("Asia/Kolkata", &["Mon", "Tue", "Wed", "Sat", "Sun"], "00:00", "00:00"),
        ]);
        assert!(!s.is_always_open()); // not detectable from one zone alone
        let p = s.profile(utc(2026, 1, 8, 0, 0)).unwrap_or_else(|| panic!("profile"));
        assert!(p.always_open);
        assert_eq!(p.period, ALWAYS_OPEN_PERIOD);
    }

    #[test]
    fn no_entries() {
        let s = schedule(&[]);
        assert!(s.is_empty());
        assert_eq!(s.period(utc(2026, 1, 1, 0, 0)), None);
        assert!(!s.in_window(utc(2026, 1, 1, 0, 0)));
        assert_eq!(s.next_start_after(utc(2026, 1, 1, 0, 0)), None);
    }
}
