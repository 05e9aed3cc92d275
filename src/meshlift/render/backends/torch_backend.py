"""Pure-PyTorch visibility backend: chunked bounding-box enumeration + packed-key scatter-min z-buffer.

Algorithm (per chunk of triangles, everything vectorised):

1. gather the clip-space vertices; screen bounding box of the part in front of the near plane
   (:func:`~meshlift.render.backends._common.screen_bbox`); drop empty boxes;
2. split each box into *work items* of whole rows holding at most ``max_fragments / 2`` pixels (large
   triangles become several items), and group consecutive items into batches of at most
   ``max_fragments`` candidate fragments;
3. per batch: evaluate the three edge functions and ``z/w`` at each candidate pixel centre (homogeneous
   rasterization, see ``_common``), keep covered fragments with ``−1 ≤ z/w ≤ 1``, pack
   ``(z/w, triangle index)`` into one int64 key and ``scatter_reduce(amin)`` it into a per-pixel key
   buffer. Chunks merge through the same buffer, so the result is independent of the chunking and ties go
   deterministically to the lower triangle index.

Peak memory (measured on CPU, float32): about 170 bytes per live candidate fragment, i.e. up to
~170 B × ``max_fragments`` (2.7 GiB at the default 2^24, reached only by scenes with that many
candidates; 1M triangles at 1024² whole-object view needs ~0.5 GiB), plus ~500 bytes per triangle of
the current triangle chunk (``max_fragments / 8`` triangles), plus ~24 bytes per output pixel. No tensor
of size triangles × pixels is ever formed. Lower ``max_fragments`` to trade speed for memory.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from meshlift.render.backends._common import (  # noqa: I001
    INT64_MAX,
    depth_key,
    key_to_index,
    pixel_centers_ndc,
    screen_bbox,
    triangle_planes,
)


#: Boxes up to 2^_STAMP_LOG2 pixels on each side use the stamp path.
_STAMP_LOG2 = 4
_N_BUCKETS = (_STAMP_LOG2 + 1) ** 2


class TorchBackend:
    """Reference visibility backend, pure PyTorch, runs on any device torch supports."""

    name = "torch"

    def is_available(self, device: torch.device) -> bool:
        return True

    @torch.no_grad()
    def visibility(
        self,
        pos: torch.Tensor,
        tri: torch.Tensor,
        resolution: Tuple[int, int],
        ranges: Optional[torch.Tensor],
        max_fragments: int,
    ) -> torch.Tensor:
        H, W = int(resolution[0]), int(resolution[1])
        dev = pos.device
        T = tri.shape[0]
        if ranges is None:
            B, V = pos.shape[0], pos.shape[1]
            pos_flat = pos.reshape(-1, 4)
            n_inst = B * T
        else:
            B = ranges.shape[0]
            pos_flat = pos
            r = ranges.to(device=dev, dtype=torch.int64)
            counts = r[:, 1]
            ends = torch.cumsum(counts, 0)
            n_inst = int(ends[-1]) if B else 0
        keys = torch.full((B * H * W + 1,), INT64_MAX, dtype=torch.int64, device=dev)  # +1: spare slot
        budget = max(int(max_fragments), 2 * W, 64)
        tri_chunk = max(budget // 8, 1024)
        for s in range(0, n_inst, tri_chunk):
            k = torch.arange(s, min(n_inst, s + tri_chunk), device=dev)
            if ranges is None:
                b = k // T
                t = k - b * T
                vidx = tri[t] + (b * V).unsqueeze(1)
            else:
                b = torch.searchsorted(ends, k, right=True)
                t = r[b, 0] + (k - (ends[b] - counts[b]))
                vidx = tri[t]
            self._chunk(pos_flat[vidx], b, t, keys, H, W, budget)
        return key_to_index(keys[:-1]).view(B, H, W)

    @staticmethod
    def _chunk(
        v: torch.Tensor,
        b: torch.Tensor,
        t: torch.Tensor,
        keys: torch.Tensor,
        H: int,
        W: int,
        budget: int,
    ) -> None:
        """Rasterize triangles ``v [n, 3, 4]`` (image ``b [n]``, index ``t [n]``) into ``keys``."""
        i0, i1, j0, j1 = screen_bbox(v, H, W)
        cw = j1 - j0 + 1
        ch = i1 - i0 + 1
        edges, zplane, det = triangle_planes(v)
        keep = (cw > 0) & (ch > 0) & (det != 0)
        idx = keep.nonzero().squeeze(1)
        if idx.numel() == 0:
            return
        i0, j0, cw, ch = i0[idx], j0[idx], cw[idx], ch[idx]
        sgn = torch.sign(det[idx])
        # per-triangle parameters: sign-normalised edge planes (covered iff all >= 0) and z/w plane
        params = torch.cat(
            [(edges[idx] * sgn[:, None, None]).reshape(-1, 9), zplane[idx] / det[idx, None]], dim=1
        )
        base = (b[idx] * (H * W)).to(torch.int64)
        tid = t[idx].to(torch.int64)

        # small boxes: square stamps of 2^l pixels a side (broadcasting, no per-fragment gathers),
        # one bucket per l; larger boxes: row-split work items (``_rows``).
        side = torch.maximum(cw, ch).to(torch.float32)
        lvl = torch.ceil(torch.log2(side)).to(torch.int64).clamp(max=_STAMP_LOG2 + 1)
        order = torch.argsort(lvl, stable=True)
        counts = torch.bincount(lvl, minlength=_STAMP_LOG2 + 2).tolist()
        pos0 = 0
        for lv, n in enumerate(counts):
            if n == 0:
                continue
            sel_all = order[pos0 : pos0 + n]
            pos0 += n
            if lv > _STAMP_LOG2:
                TorchBackend._rows(sel_all, i0, j0, cw, ch, params, base, tid, keys, H, W, budget, v.dtype)
                continue
            sz = 1 << lv
            per = max(budget // (sz * sz), 1)
            for s0 in range(0, n, per):
                TorchBackend._stamps(sel_all[s0 : s0 + per], sz, i0, j0, cw, ch, params, base, tid, keys, H, W, v.dtype)

    @staticmethod
    def _stamps(sel, sz, i0, j0, cw, ch, params, base, tid, keys, H, W, dtype) -> None:
        """Rasterize triangles ``sel`` whose boxes fit in ``sz × sz`` pixels with broadcast stamps."""
        ar = torch.arange(sz, device=keys.device)
        cols = j0.index_select(0, sel).unsqueeze(1) + ar  # [n, sz]
        rows = i0.index_select(0, sel).unsqueeze(1) + ar  # [n, sz]
        px = ((2 * cols + 1).to(dtype) / W - 1).unsqueeze(1)  # [n, 1, sz]
        py = ((2 * rows + 1).to(dtype) / H - 1).unsqueeze(2)  # [n, sz, 1]
        p = params.index_select(0, sel).unsqueeze(-1).unsqueeze(-1)  # [n, 12, 1, 1]
        ok = (ar < ch.index_select(0, sel).unsqueeze(1)).unsqueeze(2) & (
            ar < cw.index_select(0, sel).unsqueeze(1)
        ).unsqueeze(1)
        for k in range(3):
            ok &= (p[:, 3 * k] * px + p[:, 3 * k + 1] * py + p[:, 3 * k + 2]) >= 0
        zw = p[:, 9] * px + p[:, 10] * py + p[:, 11]
        ok &= (zw >= -1) & (zw <= 1)
        f = ok.view(-1).nonzero().squeeze(1)
        if f.numel() == 0:
            return
        tl = f // (sz * sz)
        pix = base.index_select(0, sel).view(-1, 1, 1) + rows.unsqueeze(2) * W + cols.unsqueeze(1)
        key = depth_key(zw.reshape(-1).index_select(0, f), tid.index_select(0, sel).index_select(0, tl))
        keys.scatter_reduce_(0, pix.view(-1).index_select(0, f), key, reduce="amin", include_self=True)

    @staticmethod
    def _rows(sel, i0, j0, cw, ch, params, base, tid, keys, H, W, budget, dtype) -> None:
        """Rasterize large triangles ``sel`` as row-split work items under the fragment budget."""
        dev = keys.device
        i0, j0, cw, ch = i0[sel], j0[sel], cw[sel], ch[sel]
        params, base, tid = params[sel], base[sel], tid[sel]
        idx = sel
        # work items: whole rows of a box, at most budget/2 pixels each
        half = max(budget // 2, 1)
        rows_per = torch.clamp(half // cw, min=1)
        n_items = (ch + rows_per - 1) // rows_per
        m = idx.numel()
        item_tri = torch.repeat_interleave(torch.arange(m, device=dev), n_items)
        first = torch.cumsum(n_items, 0) - n_items
        kk = torch.arange(item_tri.numel(), device=dev) - first[item_tri]
        rp = rows_per[item_tri]
        item_row0 = i0[item_tri] + kk * rp
        item_rows = torch.minimum(rp, ch[item_tri] - kk * rp)
        item_cw = cw[item_tri]
        item_cnt = item_rows * item_cw
        item_end = torch.cumsum(item_cnt, 0)
        item_start = item_end - item_cnt
        total = int(item_end[-1])
        n_groups = (total + half - 1) // half
        group = item_start // half
        bounds = torch.searchsorted(group, torch.arange(n_groups + 1, device=dev)).tolist()
        starts_cpu = torch.cat([item_start, item_end[-1:]])[bounds].tolist()
        for g in range(n_groups):
            a, z = bounds[g], bounds[g + 1]
            if z <= a:
                continue
            F = starts_cpu[g + 1] - starts_cpu[g]
            if F == 0:
                continue
            frag_item = torch.repeat_interleave(
                torch.arange(a, z, device=dev), item_cnt[a:z], output_size=F
            )
            local = torch.arange(F, device=dev) - (item_start.index_select(0, frag_item) - starts_cpu[g])
            fcw = item_cw.index_select(0, frag_item)
            r = local // fcw
            c = local - r * fcw
            ft = item_tri.index_select(0, frag_item)
            row = item_row0.index_select(0, frag_item) + r
            col = j0.index_select(0, ft) + c
            px, py = pixel_centers_ndc(row, col, H, W, dtype)
            p = params.index_select(0, ft)
            e0 = p[:, 0] * px + p[:, 1] * py + p[:, 2]
            e1 = p[:, 3] * px + p[:, 4] * py + p[:, 5]
            e2 = p[:, 6] * px + p[:, 7] * py + p[:, 8]
            zw = p[:, 9] * px + p[:, 10] * py + p[:, 11]
            ok = (e0 >= 0) & (e1 >= 0) & (e2 >= 0) & (zw >= -1) & (zw <= 1)
            sel = ok.nonzero().squeeze(1)
            if sel.numel() == 0:
                continue
            ft = ft[sel]
            pix = base[ft] + row[sel] * W + col[sel]
            keys.scatter_reduce_(0, pix, depth_key(zw[sel], tid[ft]), reduce="amin", include_self=True)
