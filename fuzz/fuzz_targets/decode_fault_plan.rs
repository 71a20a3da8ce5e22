//! Fault plan decoding never panics and accepts only canonical plans: `decode(s)` Ok implies
//! `encode(decode(s)) == s`, and every decoded fault is valid.
#![no_main]

use dei_propagator::FaultPlan;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(plan) = FaultPlan::decode(text) {
        assert_eq!(plan.encode(), text, "accepted a non-canonical plan");
        assert!(plan.entries().iter().all(|(_, fault)| fault.is_valid()));
        assert_eq!(FaultPlan::try_new(plan.entries().to_vec()).as_ref(), Ok(&plan));
    }
});
