"""Fault-tolerant process groups and training (the public names are re-exported by :mod:`ptc.distributed`).

===============  ===========================================================
module           what
===============  ===========================================================
``group``        :class:`FaultTolerantGroup`, ``init_fault_tolerant``: one
                 worker's abortable collectives, recover, rejoin, grow
``coordinator``  membership by generation, liveness, abort broadcast
                 (``python -m ptc.distributed.ft.coordinator``)
``wire``         the messages between workers and their coordinator, and
                 their schema
``auth``         the job secret: where it comes from, the proofs of the
                 handshake
``gloo``         how a generation's gloo group is connected, ended and kept
``train``        :class:`Trainer`: the commit vote, state sync, DDP
``vote``         the vote that rides with a step's gradients
``transports``   how a step's gradients reach the group (after backward,
                 DDP hook in Python, DDP hook in C++)
``native``       the DDP hook in C++ (``native.cpp``), built on request
``launch``       :class:`LocalJob`: a coordinator and worker processes on
                 this machine
``faults``       the fault-injection kit (tests, demos, benchmarks)
===============  ===========================================================
"""
