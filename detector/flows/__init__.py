"""Flow table and Community ID: packets grouped into Zeek-like connections.

    ft = FlowTable()            # IDLE_TIMEOUT_S per protocol, or idle_timeout_s=...
    ft.update(batch)            # each decoded PacketBatch, in capture order
    ft.merge(other)             # absorb the table of the packets that follow
    cols = ft.finish()          # FLOW_COLUMNS as numpy arrays
    frame = ft.to_frame()       # pandas view
"""
from .community_id import community_id
from .table import IDLE_TIMEOUT_S, FlowTable
from .view import FLOW_COLUMNS

__all__ = ["FlowTable", "community_id", "FLOW_COLUMNS", "IDLE_TIMEOUT_S"]
