"""rtamt features through lhotse's own pipeline: CutSet.compute_and_store_features with a
process pool (num_jobs=2) and with a Dask LocalCluster of 2 worker processes, lilcom and
HDF5 storage, on WAV files written here; the stored features load back with
cut.load_features() and match extract()."""
from __future__ import annotations

import dask
import distributed
import numpy as np
import pytest
from lhotse import CutSet, LilcomChunkyWriter, NumpyHdf5Writer, Recording, RecordingSet
from scipy.io import wavfile

from rtamt.integrations.lhotse import DASK_WORKER_ENVIRON, RtamtConfig, RtamtExtractor, dask_config

FS = 16000
#: lilcom stores integer multiples of 2^tick_power (lhotse's default tick_power = -5)
LILCOM_TOL = 2.0 ** -5


@pytest.fixture(scope="module")
def cuts(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    recs = []
    for i, sec in enumerate((1.0, 1.3, 1.6, 1.15)):
        n = int(sec * FS)
        t = np.arange(n) / FS
        x = 0.1 * rng.standard_normal(n) * (1 + 0.8 * np.sin(2 * np.pi * (2 + i) * t))
        path = d / f"utt{i}.wav"
        wavfile.write(path, FS, (x * 32767).astype(np.int16))
        recs.append(Recording.from_file(path))
    return CutSet.from_manifests(recordings=RecordingSet.from_recordings(recs))


def _check_loaded(cuts_with_feats, ext, exact):
    assert len(cuts_with_feats) == 4
    for cut in cuts_with_feats:
        assert cut.has_features and cut.features.type == "rtamt"
        got = cut.load_features()
        want = ext.extract(cut.load_audio(), cut.sampling_rate)
        assert got.shape == want.shape == (cut.num_frames, ext.feature_dim(FS))
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=LILCOM_TOL)


def test_num_jobs_2_lilcom(cuts, tmp_path):
    ext = RtamtExtractor(RtamtConfig(model="dau1997"))
    out = cuts.compute_and_store_features(ext, tmp_path / "feats", num_jobs=2,
                                          storage_type=LilcomChunkyWriter, progress_bar=False)
    _check_loaded(out, ext, exact=False)
    assert sorted(p.name for p in (tmp_path / "feats").iterdir()) == [
        "feats-0.lca", "feats-1.lca"]


def test_dask_local_cluster_hdf5(cuts, tmp_path):
    ext = RtamtExtractor(RtamtConfig(model="dau1997", output="adaptloop", pooling="rms"))
    with dask.config.set(dask_config()), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        out = cuts.compute_and_store_features(ext, tmp_path / "feats", num_jobs=2,
                                              executor=client,
                                              storage_type=NumpyHdf5Writer, progress_bar=False)
        workers = client.run(lambda: (__import__("os").getpid(),
                                      __import__("os").environ.get("MALLOC_MMAP_THRESHOLD_")))
    assert len({pid for pid, _ in workers.values()}) == 2      # two worker processes
    # the workers got the malloc setting the extractor needs (rtamt.integrations.lhotse)
    assert {env for _, env in workers.values()} == {str(DASK_WORKER_ENVIRON[
        "MALLOC_MMAP_THRESHOLD_"])}
    _check_loaded(out, ext, exact=True)
    assert sorted(p.name for p in (tmp_path / "feats").iterdir()) == [
        "feats-0.h5", "feats-1.h5"]
    # the manifest survives a round trip through JSONL and loads the same features
    out.to_file(tmp_path / "cuts.jsonl.gz")
    back = CutSet.from_file(tmp_path / "cuts.jsonl.gz")
    for a, b in zip(out, back):
        np.testing.assert_array_equal(a.load_features(), b.load_features())
