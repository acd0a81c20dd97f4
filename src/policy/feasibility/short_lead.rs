//! Layer 3 of feasibility: one claim's short lead ([`short_lead`]), judged on the claim's own
//! expireAfter (and with `ageThreshold: windows`, its own life).
use chrono::{DateTime, Duration, Utc};

use super::{Cause, Finding};
use crate::policy::chances;
use crate::policy::derive;
use crate::policy::duration::{ExpireAfter, format_human};
use crate::policy::settings::{AgeThreshold, Effective};
use crate::policy::window::Occurrence;

/// Layer 3 for one claim: its own `E <= K*P + t_rot` (auto or override alike) means it cannot
/// get K chances; it is counted, announced with `ShortLead`, and rotated at the first chance.
/// With `ageThreshold: windows` the claim's own life (from `created`) is what counts: fewer
/// than K chances in it ([`chances::last_chances`], searching `listed` first).
pub(crate) fn short_lead(
    settings: &Effective,
    expire_after: ExpireAfter,
    termination_grace_period: Option<Duration>,
    period: Duration,
    created: Option<DateTime<Utc>>,
    listed: &[Occurrence],
) -> Option<Finding> {
    let e = expire_after.duration()?;
    let k = settings.min_rotation_chances;
    if settings.age_threshold == AgeThreshold::Windows && settings.schedule.has_gaps() {
        let t_rot = settings.t_rot(termination_grace_period);
        let created = created?;
        let deadline = created.checked_add_signed(e)?;
        let got =
            chances::last_chances(&settings.schedule, listed, created, deadline, t_rot, k).count;
        return (got < k.max(1)).then(|| {
            Finding::new(
                Cause::ShortLead,
                format!(
                    "expireAfter {} leaves this node {got} window occurrence(s) in which a \
                     rotation can start and finish (t_rot = {}) before its forced expiry: it \
                     cannot get {k} window chances",
                    format_human(e),
                    format_human(t_rot)
                ),
                SHORT_LEAD_FIX,
            )
        });
    }
    let lead = derive::lead_time(k, period, settings.t_rot(termination_grace_period));
    (e <= lead).then(|| {
        Finding::new(
            Cause::ShortLead,
            format!(
                "expireAfter {} is not longer than K*P + t_rot = {}: this node cannot get {k} \
                 window chances",
                format_human(e),
                format_human(lead)
            ),
            SHORT_LEAD_FIX,
        )
    })
}

/// What `ShortLead` advises (the warning latch keys on it: one per claim, whatever the mode).
const SHORT_LEAD_FIX: &str =
    "it is rotated at its first chance; raise the NodePool's expireAfter for new nodes";
