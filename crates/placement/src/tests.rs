use proptest::prelude::*;

use super::*;

/// Deep1B as the paper's Table 1 and Figure 7(b) give it: 1B x 96, sketch
/// of 96, rows of 32, and 256 copies whose ripples of 16 entries and key
/// tables take 34% of 316 GiB (here ripples of 32, twice the entries).
fn deep1b() -> IndexSizes {
    let copies_at_16 = (0.34 * 316.0 * GIB as f64) as u64;
    let tables = copies_at_16 * 2 / 5;
    IndexSizes {
        copies: 256,
        list_len: 32,
        ripples: 2 * (copies_at_16 - tables),
        key_tables: tables,
        sketch: 96_000_000_000,
        rows: 128_000_000_000,
        vectors: 192_000_000_000,
        small: 1 << 20,
    }
}

#[test]
fn deep1b_on_four_h100s_keeps_the_per_wave_parts_in_hbm_with_ripples_of_16() {
    let p = plan(&deep1b(), &Machine::new(4, 93 * GIB, 960_000_000_000)).unwrap();
    assert_eq!(
        p.shrinks,
        vec![Shrink::ListLen { from: 32, to: 16 }],
        "the paper's choice"
    );
    for part in [Part::Copies, Part::Sketch, Part::Rows] {
        let at = p.placement(part);
        assert_eq!((at.tier, at.layout), (Tier::Gpu, Layout::Split), "{part:?}");
    }
    assert_eq!(p.placement(Part::Vectors).tier, Tier::Host);
    // The paper: 80.2 of 93 GiB a GPU with its search buffers; 179 GiB of
    // vectors in host memory.
    let per_gpu = p.gpu_bytes as f64 / GIB as f64;
    assert!((76.0..80.2).contains(&per_gpu), "{per_gpu}");
    assert_eq!(p.host_bytes, 192_000_000_000);
}

#[test]
fn small_indexes_are_replicated_and_cpu_plans_use_the_disk() {
    let s = IndexSizes {
        copies: 32,
        list_len: 16,
        ripples: 3 * GIB,
        key_tables: GIB,
        sketch: GIB,
        rows: GIB,
        vectors: 2 * GIB,
        small: 1 << 20,
    };
    let p = plan(&s, &Machine::new(2, 80 * GIB, 100 * GIB)).unwrap();
    assert!(p
        .placements
        .iter()
        .all(|x| (x.tier, x.layout) == (Tier::Gpu, Layout::Replicated)));
    assert!(p.shrinks.is_empty() && p.gpu_bytes == s.total());
    // A CPU with room for the per-wave parts only: vectors read from disk.
    let cpu = Machine::new(0, 0, 7 * GIB);
    let p = plan(&s, &cpu).unwrap();
    assert_eq!(p.placement(Part::Vectors).tier, Tier::Disk);
    assert_eq!((p.host_bytes, p.disk_bytes), (s.per_wave(), s.vectors));
    // Less: ripples shrink first.
    let p = plan(&s, &Machine::new(0, 0, 5 * GIB)).unwrap();
    assert!(!p.shrinks.is_empty() && p.host_bytes <= 5 * GIB);
    // Too little, and a full disk.
    assert!(matches!(
        plan(&s, &Machine::new(0, 0, GIB)),
        Err(PlanError::DoesNotFit {
            tier: Tier::Host,
            ..
        })
    ));
    let full = Machine {
        disk: Some(GIB),
        ..cpu
    };
    assert!(matches!(
        plan(&s, &full),
        Err(PlanError::DoesNotFit {
            tier: Tier::Disk,
            ..
        })
    ));
}

#[test]
fn shrink_steps_cut_ripples_to_16_then_copies_then_ripples() {
    assert_eq!(
        shrink_steps(64, 64),
        vec![
            (64, 64),
            (64, 32),
            (64, 16),
            (32, 16),
            (16, 16),
            (8, 16),
            (8, 8)
        ]
    );
    assert_eq!(shrink_steps(8, 8), vec![(8, 8)]);
    assert_eq!(shrink_steps(4, 4), vec![(4, 4)]);
}

#[test]
fn byte_sizes_parse_as_written() {
    assert_eq!(parse_bytes("80e9"), Ok(80_000_000_000));
    assert_eq!(parse_bytes("80GB"), Ok(80_000_000_000));
    assert_eq!(parse_bytes("93GiB"), Ok(93 * GIB));
    assert_eq!(parse_bytes("1.5 TB"), Ok(1_500_000_000_000));
    assert_eq!(parse_bytes("4096"), Ok(4096));
    assert!(parse_bytes("80 parsecs").is_err());
    assert!(parse_bytes("-1GB").is_err());
    assert!(parse_bytes("1e30").is_err());
}

fn sizes() -> impl Strategy<Value = IndexSizes> {
    (
        (0u32..6).prop_map(|e| 8 << e),
        (0u32..4).prop_map(|e| 8 << e),
        (
            1u64..1 << 20,
            1u64..1 << 20,
            1u64..1 << 20,
            1u64..1 << 20,
            1u64..1 << 20,
        ),
        1u64..1 << 10,
    )
        .prop_map(
            |(copies, list_len, (r, t, sk, rows, v), small)| IndexSizes {
                copies,
                list_len,
                ripples: r * copies as u64 * list_len as u64 * 64,
                key_tables: t * copies as u64 * 64,
                sketch: sk << 10,
                rows: rows << 10,
                vectors: v << 11,
                small,
            },
        )
}

fn machines() -> impl Strategy<Value = Machine> {
    (
        0u32..9,
        1u64..1 << 34,
        1u64..1 << 36,
        prop::option::of(1u64..1 << 36),
        0.0f64..0.5,
    )
        .prop_map(
            |(gpus, gpu_memory, host_memory, disk, gpu_headroom)| Machine {
                gpus,
                gpu_memory,
                host_memory,
                disk,
                gpu_headroom,
            },
        )
}

/// Bytes one GPU holds of the per-wave parts split over `g` GPUs, all of
/// them, or all but rows and sketch.
fn per_gpu(s: &IndexSizes, g: u64, without_rows_and_sketch: bool) -> u64 {
    let share = |b: u64| b.div_ceil(g);
    let all = share(s.copy_bytes()) + share(s.sketch) + share(s.rows) + s.small;
    if without_rows_and_sketch {
        all - share(s.rows) - share(s.sketch)
    } else {
        all
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Every plan fits the machine, places each part once, keeps per-wave
    /// parts off the disk, and puts a part in a slower tier only where no
    /// shrink keeps it in the faster one; a refusal means nothing fits.
    #[test]
    fn plans_fit_and_use_the_fastest_tier_a_shrink_allows(s in sizes(), m in machines()) {
        let steps = shrink_steps(s.copies, s.list_len);
        let smallest = steps.last().map(|&(c, l)| s.shrunk(c, l)).unwrap_or(s);
        let g = m.gpus as u64;
        match plan(&s, &m) {
            Ok(p) => {
                prop_assert_eq!(p.placements.len(), Part::ALL.len());
                for part in Part::ALL {
                    prop_assert_eq!(p.placements.iter().filter(|x| x.part == part).count(), 1);
                    if part.per_wave() {
                        prop_assert!(p.placement(part).tier != Tier::Disk);
                    }
                }
                prop_assert!(p.host_bytes <= m.host_memory);
                prop_assert!(m.disk.is_none_or(|d| p.disk_bytes <= d));
                // Shrinks only where the step before did not fit.
                let kept = steps.iter().position(|&(c, l)| (c, l) == (p.sizes.copies, p.sizes.list_len));
                prop_assert!(kept.is_some());
                let kept = kept.unwrap_or(0);
                if g == 0 {
                    prop_assert_eq!(p.gpu_bytes, 0);
                    prop_assert!(p.placements.iter().all(|x| x.tier != Tier::Gpu));
                    if kept > 0 {
                        let (c, l) = steps[kept - 1];
                        prop_assert!(s.shrunk(c, l).per_wave() > m.host_memory);
                    }
                    if p.placement(Part::Vectors).tier == Tier::Disk {
                        prop_assert!(p.sizes.total() > m.host_memory);
                    }
                } else {
                    let cap = m.gpu_capacity();
                    prop_assert!(p.gpu_bytes <= cap, "{} > {}", p.gpu_bytes, cap);
                    if kept > 0 {
                        let (c, l) = steps[kept - 1];
                        prop_assert!(per_gpu(&s.shrunk(c, l), g, false) > cap);
                    }
                    if p.per_wave_off_gpu() {
                        prop_assert_eq!(kept, steps.len() - 1);
                        prop_assert!(per_gpu(&smallest, g, false) > cap);
                        prop_assert_eq!(p.placement(Part::Copies).tier, Tier::Gpu);
                        if p.placement(Part::Sketch).tier == Tier::Host {
                            prop_assert!(per_gpu(&smallest, g, false) - smallest.rows.div_ceil(g) > cap);
                        }
                    }
                    if p.placement(Part::Vectors).tier != Tier::Gpu {
                        let share = if g > 1 { p.sizes.vectors.div_ceil(g) } else { p.sizes.vectors };
                        prop_assert!(p.gpu_bytes + share > cap);
                    }
                    if p.placement(Part::Vectors).tier == Tier::Disk {
                        prop_assert!(p.host_bytes + p.sizes.vectors > m.host_memory);
                    }
                }
            }
            Err(PlanError::DoesNotFit { tier, .. }) => match (g, tier) {
                (0, Tier::Host) => prop_assert!(smallest.per_wave() > m.host_memory),
                (_, Tier::Host) => prop_assert!(per_gpu(&smallest, g, true) <= m.gpu_capacity()
                    && smallest.rows + smallest.sketch > m.host_memory),
                (_, Tier::Gpu) => prop_assert!(per_gpu(&smallest, g, true) > m.gpu_capacity()),
                (_, Tier::Disk) => prop_assert!(m.disk.is_some_and(|d| d < s.vectors)),
            },
        }
    }

    /// More GPU memory never keeps fewer copies or shorter ripples.
    #[test]
    fn more_gpu_memory_never_shrinks_more(s in sizes(), m in machines()) {
        let more = Machine { gpu_memory: m.gpu_memory.saturating_mul(2), ..m };
        if let (Ok(a), Ok(b)) = (plan(&s, &m), plan(&s, &more)) {
            prop_assert!(b.sizes.copies >= a.sizes.copies);
            prop_assert!(b.sizes.list_len >= a.sizes.list_len);
        }
    }
}
