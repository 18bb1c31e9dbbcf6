"""Flow table and Community ID: packets grouped into Zeek-like connections."""
from .community_id import community_id

__all__ = ["community_id"]
