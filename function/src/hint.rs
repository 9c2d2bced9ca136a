//! Cache hints shared by the stages: they may make a later load faster and can never change a
//! result.

/// Asks the CPU to start loading every cache line of `data` into all cache levels.
#[inline(always)]
pub fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = data.as_ptr() as *const i8;
        for off in (0..std::mem::size_of_val(data)).step_by(64) {
            // SAFETY: a prefetch never faults and has no architectural effect; the address is
            // inside `data` anyway. SSE is part of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}
