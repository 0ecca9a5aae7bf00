"""Launch test stranger: someone else's traffic at a rendezvous port, bounded in count and time.

Usage: launch_stranger.py HOST PORT JOB [--seconds S] [--idle N] [--messages N]
                          [--connections N] [--forge] [--seed K]

For at most S seconds, and within its budgets, it:

* holds N idle connections open to HOST:PORT (half say nothing, half trickle one byte a
  second and never end a line), opening a new one half a second after the master closes
  one, at most --connections in all;
* sends --messages messages spread over the S seconds, each on a connection of its own,
  cycling through: random bytes, a 4 MB line, JSON of another shape, a join of another job,
  a well-formed join of job JOB for node rank 0, a message of protocol version 99, JOB's
  ``stop`` and ``end`` (the master's own messages), an HTTP request; with --forge also
  well-formed joins of JOB for node ranks 1 and 2 with a forged HMAC (which a master without
  a secret would admit: only for jobs that have one).

It ends on SIGTERM / SIGINT too, and prints one line at its end::

    STRANGER {"messages": 400, "opened": 412, "closed_on_it": 210, "answers": {...}, "cpu_s": 1.2}

``closed_on_it`` counts idle connections the master closed; ``answers`` the master's replies
to the messages by their first words (``error: not a rendezvous message``, ..., ``closed``);
``cpu_s`` the stranger's own CPU seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import signal
import time

from tfdp.launch.protocol import PROTOCOL_VERSION


def _payloads(job: str, rng: random.Random, forge: bool) -> list[bytes]:
    def line(**fields: object) -> bytes:
        return json.dumps(fields).encode() + b"\n"

    join = {"v": PROTOCOL_VERSION, "job": job, "type": "join", "node_rank": 0, "min_nodes": 2,
            "max_nodes": 2, "nproc": 1, "addr": "127.0.0.1", "ports": [2222],
            "instance": "stranger", "host": "stranger", "nonce": "00" * 16, "seq": 0}  # fmt: skip
    out = [
        bytes(rng.randrange(256) for _ in range(300)) + b"\n",
        b"x" * (4 << 20) + b"\n",
        line(hello="world", numbers=[1, 2, 3]),
        line(**{**join, "job": "someone-else"}),
        line(**join),
        line(**{**join, "v": 99}),
        line(v=PROTOCOL_VERSION, job=job, type="stop", round=0, reason="stranger", signal=9, seq=0),
        line(
            v=PROTOCOL_VERSION, job=job, type="end", status=0, message="stranger", signal=0, seq=0
        ),
        b"GET / HTTP/1.1\r\nHost: rendezvous\r\n\r\n",
    ]
    if forge:
        for rank in (1, 2):
            out.append(line(**{**join, "node_rank": rank, "max_nodes": 3, "mac": "ab" * 32}))
    return out


class Stranger:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.seconds
        self.opened = 0
        self.idle_opened = 0
        self.closed_on_it = 0
        self.sent = 0
        self.answers: dict[str, int] = {}
        self.stop = asyncio.Event()

    def over(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.deadline

    async def _connect(
        self, idle: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        if idle and self.idle_opened >= self.args.connections:
            return None
        self.idle_opened += idle
        self.opened += 1
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(self.args.host, self.args.port), 5
            )
        except (OSError, TimeoutError):
            return None

    async def idle(self, trickle: bool) -> None:
        """One idle connection, opened again each time the master closes it."""
        while not self.over():
            pair = await self._connect(idle=True)
            if pair is None:
                if self.idle_opened >= self.args.connections:
                    return
                await asyncio.sleep(0.5)
                continue
            reader, writer = pair
            try:
                while not self.over():
                    if trickle:
                        writer.write(b"{")
                        await writer.drain()
                    try:
                        if not await asyncio.wait_for(reader.read(65536), 1.0):
                            self.closed_on_it += 1
                            break
                    except TimeoutError:
                        continue
            except (OSError, ConnectionError):
                self.closed_on_it += 1
            finally:
                writer.close()
            await asyncio.sleep(0.5)

    async def message(self, payload: bytes) -> None:
        pair = await self._connect()
        if pair is None:
            return
        reader, writer = pair
        answer = "closed"  # the master closed it without a word (or the stranger gave up)
        try:
            writer.write(payload)
            await writer.drain()
            self.sent += 1
            while True:
                line = await asyncio.wait_for(reader.readline(), 5)
                if not line:
                    break
                reply = json.loads(line)
                if reply.get("type") == "error":
                    answer = "error: " + " ".join(str(reply.get("message")).split()[:4])
                    break
        except (OSError, ConnectionError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
        self.answers[answer] = self.answers.get(answer, 0) + 1

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop.set)
        rng = random.Random(self.args.seed)
        payloads = _payloads(self.args.job, rng, self.args.forge)
        idle = [asyncio.create_task(self.idle(i % 2 == 1)) for i in range(self.args.idle)]
        gap = self.args.seconds / max(self.args.messages, 1)
        pending = set()
        for k in range(self.args.messages):
            if self.over():
                break
            pending.add(asyncio.create_task(self.message(payloads[k % len(payloads)])))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), gap)
        if pending:
            await asyncio.wait(pending, timeout=10)
        if not self.over():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.deadline - time.monotonic())
        self.stop.set()
        await asyncio.wait(idle, timeout=5)
        for task in (*idle, *pending):
            task.cancel()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        report = {"messages": self.sent, "opened": self.opened,
                  "closed_on_it": self.closed_on_it, "answers": self.answers,
                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}  # fmt: skip
        print("STRANGER " + json.dumps(report, sort_keys=True), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("job")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--idle", type=int, default=200)
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--forge", action="store_true")
    ap.add_argument("--seed", type=int, default=37)
    asyncio.run(Stranger(ap.parse_args()).run())


if __name__ == "__main__":
    main()
