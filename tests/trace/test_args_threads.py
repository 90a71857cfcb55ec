"""Args columns built and read on several threads at once (the explorer loads traces on a pool):
zstandard's compressors may not be shared between threads, so each thread has its own."""

from __future__ import annotations

import threading

from trnscope.trace.args import ArgsColumn


def test_args_columns_compress_and_read_on_many_threads_at_once():
    rows = [{"row": i, "text": "x" * (i % 97), "values": list(range(i % 13))} for i in range(4000)]
    errors: list[BaseException] = []
    start = threading.Barrier(6, timeout=60)

    def work(seed: int) -> None:
        try:
            start.wait()
            for k in range(5):
                mine = [dict(r, seed=seed, round=k) for r in rows[seed * 100:]]
                column = ArgsColumn.from_dicts(mine)
                assert column.get_many() == mine
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
