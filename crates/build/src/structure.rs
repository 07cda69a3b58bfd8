//! Everything of an index but its neighbour rows, phase by phase: PCA, the
//! copy map and its spacings, principal coordinates, the ripples and key
//! tables of every copy, the sketch, and the assembled parts. The build runs
//! it beside the neighbour rows (`lib.rs`).

use super::*;

/// Everything of the index but its neighbour rows: PCA, the copy map and its
/// spacings, the principal coordinates, the ripples and key tables of every
/// copy, the sketch, and the assembled parts (`rows` left empty).
#[allow(clippy::too_many_arguments)]
pub(crate) fn structure(
    x: &[f32],
    sdim: usize,
    dim: usize,
    metric: Metric,
    max_norm: f32,
    p: &ResolvedParams,
    on_gpu: bool,
    report: &mut BuildReport,
    progress: &dyn Progress,
) -> Result<(IndexParts, CopyMap, spacing::SpacingChoice, Vec<u32>), BuildError> {
    let n = x.len() / sdim;
    // A context of its own (own stream and cuBLAS handle, exact f32
    // products), apart from the one the rows' TF32 products used.
    let gpu = match on_gpu {
        true => Some(report.phase("gpu_open", || Device::open(0))?),
        false => None,
    };
    // PCA: the copies draw from the top-64 subspace, the sketch needs the top
    // w (chosen here from the spectrum unless given).
    let m_copy = sdim.min(64);
    let mut w = p.sketch_width;
    let sample = pca::sample_rows(n, p.pca_sample, p.seed);
    let pca = report.phase("pca", || {
        pca::fit(x, sdim, &sample, |spectra| {
            if p.sketch_width_auto {
                w = sketch::width_for_spectra(spectra.global, spectra.local);
            }
            m_copy.max(w.min(sdim))
        })
    });
    let m = pca.m;
    let held = pca.spectrum[..w.min(sdim)].iter().sum::<f64>()
        / pca.spectrum.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let held_local = pca.local[..w.min(sdim)].iter().sum::<f64>()
        / pca.local.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    tracing::info!(
        sketch_width = w,
        chosen = p.sketch_width_auto,
        variance_held = held,
        local_held = held_local,
        "sketch width"
    );
    report.sketch_width = w;
    report.sketch_variance = held;
    let scales = pca::copy_scales(&pca.variances[..m_copy], &pca.local[..m_copy]);
    let mean_scale = scales.iter().sum::<f64>() / m_copy as f64;
    let map_params = CopyMapParams {
        copies: p.copies,
        blocks: p.blocks,
        seed: p.seed,
    };
    let mut map = CopyMap::random(
        &pca.mean,
        &pca.basis,
        m,
        m_copy,
        &scales,
        &map_params,
        vec![1.0],
    );
    // Principal coordinates of every vector: the input of every copy's
    // projection and, in their first w columns, of the sketch.
    // On the GPU the f16 rerank vectors come from the same upload.
    let want_f16 = p.vector_dtype == VectorDtype::F16;
    let (pcs, vectors16) = report.phase("principal_coords", || match &gpu {
        Some(g) => gpu_rows::principal(g, &map, x, want_f16),
        None => {
            let mut pcs = vec![0f32; n * m];
            map.principal(x, &mut pcs, true);
            Ok((pcs, None))
        }
    })?;

    // Spacings, from copy 0 over (a sample of) the data.
    let choice = report.phase("spacings", || {
        if let Some(s) = &p.spacings {
            return Ok(spacing::SpacingChoice {
                spacings: s.clone(),
                hit_rates: vec![],
                median_sizes: vec![],
            });
        }
        let probe = pca::sample_rows(n, spacing::PROBE_ROWS, p.seed ^ 0x5eed);
        let z0 = ripples::project_copy(&pcs, &map, 0, Some(&probe));
        let var = z0.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / z0.len().max(1) as f64;
        tracing::info!(
            mean_scale,
            projected_variance = var,
            "scale of copy 0's projected coordinates (expect ~1)"
        );
        let targets = spacing::SpacingTargets {
            pmin: p.min_fragment,
            list_len: p.list_len,
            hit_rate: p.finest_hit_rate,
            ratio: p.spacing_ratio,
            max_spacings: p.max_spacings,
        };
        match &gpu {
            // The same projection as the CPU's, so both choose the same spacings.
            Some(g) => gpu_ripples::choose_spacings(g, &map, &z0, &targets),
            None => Ok(spacing::choose(&map, &z0, &targets)),
        }
    })?;
    if choice.spacings.is_empty()
        || !choice.spacings.windows(2).all(|w| w[0] < w[1])
        || choice.spacings.iter().any(|&s| s.is_nan() || s <= 0.0)
    {
        return Err(BuildError::Spacings {
            spacings: choice.spacings.clone(),
        });
    }
    map.spacings = choice.spacings.clone();
    tracing::info!(spacings = ?map.spacings, hit_rates = ?choice.hit_rates, median_sizes = ?choice.median_sizes, "spacings chosen");
    let nsp = map.spacings.len();

    // Fragment ripples, copy by copy.
    let pb_ripples = Stage::new(progress, "ripples", p.copies as u64);
    let device_pcs = match &gpu {
        Some(g) => Some(report.phase("principal_upload", || {
            gpu_ripples::DevicePrincipal::new(g, &pcs, m)
        })?),
        None => None,
    };
    let mut spec = ripples::RippleSpec {
        list_len: p.list_len,
        pmin: p.min_fragment,
        rule: p.ripple_rule,
        ivf: centre_knn::IvfParams {
            probes: p.ripple_probes.unwrap_or(0),
            seed: p.seed ^ 0x1f,
            ..Default::default()
        },
    };
    // Both backends find the nearest rule's ripples through the rows
    // (`ripples_by_rows`), from the members' ripples built here, unless the
    // inverted file's probes are given.
    let through_rows = spec.searches() && p.ripple_probes.is_none();
    if through_rows {
        spec.rule = ripples::RippleRule::Members;
    }
    // Copy 0's projection, for the probe choice and the check of the ripples
    // (ripples through the rows are checked after the rows).
    let z0 = match through_rows {
        true => Vec::new(),
        false => ripples::project_copy(&pcs, &map, 0, None),
    };
    report.ripple_probes = spec.searches().then_some(spec.ivf.probes);
    let ripples_on_gpu = match &gpu {
        Some(g) => gpu_ripples::fits(g, n, &spec, map.copy_dim())?,
        None => false,
    };
    let flat: FlatRipples = report.phase("ripples", || match (&gpu, &device_pcs) {
        (Some(g), Some(dp)) if ripples_on_gpu => {
            gpu_ripples::build_all(g, &map, dp, &spec, &pb_ripples)
        }
        _ => {
            let per_copy = (0..p.copies)
                .into_par_iter()
                .map(|c| {
                    let z = ripples::project_copy(&pcs, &map, c, None);
                    let r = ripples::build_copy(&map, c, &z, &spec);
                    pb_ripples.inc(1);
                    r
                })
                .collect();
            Ok(FlatRipples::from_copies(per_copy, p.list_len))
        }
    })?;
    pb_ripples.finish();
    if !through_rows {
        report.ripple_recall = report.phase("ripple_recall", || {
            probes::stored_ripple_recall(
                &map,
                0,
                &z0,
                flat.view(),
                p.list_len,
                RIPPLE_RECALL_SAMPLES,
            )
        });
        tracing::info!(
            recall = report.ripple_recall,
            "stored ripples against the exact l nearest of their centres (copy 0)"
        );
    }
    drop(z0);

    // Sketch: the first w principal coordinates (zero beyond m), scales
    // from the PCA sample.
    let sketch = report.phase("sketch", || {
        let pcs_ref: &[f32] = &pcs;
        let row = move |r: usize| (0..w).map(move |j| if j < m { pcs_ref[r * m + j] } else { 0.0 });
        let sampled: Vec<f32> = sample.iter().flat_map(|&r| row(r)).collect();
        let inner_product = metric == Metric::InnerProduct;
        let scales = match inner_product {
            true => sketch::max_scales(n, w, row),
            false => sketch::fit_scales(&sampled, w),
        };
        let choice = sketch_centres::choose(&sampled, w, &scales, p.seed, p.sketch_centres);
        tracing::info!(
            plain = choice.plain_recall,
            residual = choice.residual_recall,
            kept = choice.centres.is_some(),
            "sketch ranking of the sample's neighbours"
        );
        let ranking = (choice.plain_recall, choice.residual_recall);
        match choice.centres {
            Some(c) => {
                let coords: Vec<f32> = (0..n).into_par_iter().flat_map_iter(row).collect();
                let ids = sketch_centres::assign(&coords, w, &c.centres);
                let rows = sketch_centres::encode(&coords, w, &c, &ids);
                Ok::<_, BuildError>((rows, c.scales, c.centres, c.centre_scales, ids, ranking))
            }
            None => {
                let rows = match (&gpu, &device_pcs) {
                    (Some(g), Some(dp)) => gpu_ripples::sketch(g, dp, w, &scales)?,
                    _ => {
                        let coords: Vec<f32> = (0..n).into_par_iter().flat_map_iter(row).collect();
                        sketch::encode(&coords, &scales)
                    }
                };
                Ok((rows, scales, Vec::new(), Vec::new(), Vec::new(), ranking))
            }
        }
    })?;
    let (
        sketch_rows,
        sketch_scales,
        sketch_centres,
        sketch_centre_scales,
        sketch_centre_ids,
        ranking,
    ) = sketch;
    report.sketch_ranking = Some(ranking);
    report.sketch_centres = sketch_centre_scales.len();
    // Frees the device copy (without the `gpu` feature there is none).
    #[allow(clippy::drop_non_drop)]
    drop(device_pcs);
    drop(pcs);

    report.fragments = flat.fragments.clone();
    report.short_fragments = flat.short.clone();
    report.key_collisions = flat.collisions;
    let vectors = report.phase("rerank_vectors", || match (p.vector_dtype, vectors16) {
        (VectorDtype::F16, Some(v)) => RerankVectors::F16(v),
        (VectorDtype::F16, None) => {
            RerankVectors::F16(x.par_iter().map(|&v| half::f16::from_f32(v)).collect())
        }
        (VectorDtype::F32, _) => RerankVectors::F32(x.to_vec()),
    });
    let mut anchors = Vec::new();
    let parts = report.phase("assemble", || {
        let FlatRipples {
            tables,
            table_keys,
            table_slots,
            ripples,
            anchors: a,
            ..
        } = flat;
        if through_rows {
            anchors = a;
        }
        let header = IndexHeader {
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            metric,
            n: n as u64,
            input_dim: dim as u32,
            dim: sdim as u32,
            basis_dim: m as u32,
            rotation_dim: m_copy as u32,
            copies: p.copies as u32,
            blocks: p.blocks as u32,
            spacings: nsp as u32,
            list_len: p.list_len as u32,
            min_fragment: p.min_fragment as u32,
            sketch_width: w as u32,
            row_len: p.row_len as u32,
            vector_dtype: p.vector_dtype,
            max_norm,
            seed: p.seed,
            build_params: serde_json::to_string(&p).unwrap_or_default(),
            sections: Vec::new(),
            search_defaults: None,
            query_shell: None,
        };
        IndexParts {
            header,
            mean: pca.mean.clone(),
            basis: map.basis.clone(),
            basis_bias: map.basis_bias.clone(),
            rotation: map.rotation.clone(),
            shifts: map.shifts.clone(),
            spacings: map.spacings.clone(),
            sketch_scales,
            sketch: sketch_rows,
            sketch_centres,
            sketch_centre_scales,
            sketch_centre_ids,
            rows: Vec::new(),
            tables,
            table_keys,
            table_slots,
            ripples,
            vectors,
        }
    });
    Ok((parts, map, choice, anchors))
}
