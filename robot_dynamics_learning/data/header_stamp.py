"""
Fill a serialised message's zero header stamp in place of deserialising it.

Why: bag_player publishes a bag's raw CDR bytes. A driver that never stamps leaves
header.stamp at 0, and `rdl replay` then times its samples by the bag's log times; the live
route (bag_player -> learners -> replay_evaluator) matches predictions to samples by header
stamp, so the player must give each such message the same log time. A message whose first
field is a std_msgs/Header holds the stamp right after the 4-byte encapsulation header:
int32 sec, then uint32 nanosec, in the byte order the encapsulation names.
"""
from typing import Optional

# Encapsulation identifiers of plain CDR (XCDR1, ROS 2's default) and plain XCDR2, big and
# little endian: the header stamp sits at the same offset in all four.
_BYTE_ORDER = {b'\x00\x00': 'big', b'\x00\x01': 'little', b'\x00\x06': 'big',
               b'\x00\x07': 'little'}
_SEC, _NANOSEC, _END = 4, 8, 12


def stamp_zero_header(raw: bytes, stamp_ns: int) -> Optional[bytes]:
    """
    Return `raw` with header.stamp set to `stamp_ns` if it was 0, else None (leave it).

    `raw`: a serialised message whose first field is a std_msgs/Header. None also for bytes
    too short to hold a stamp or in an encoding this does not know.
    """
    order = _BYTE_ORDER.get(bytes(raw[:2]))
    if order is None or len(raw) < _END or any(raw[_SEC:_END]):
        return None
    if stamp_ns < 0:
        raise ValueError(f'stamp_ns must be >= 0, got {stamp_ns}')
    sec, nanosec = divmod(int(stamp_ns), 10**9)
    return b''.join((bytes(raw[:_SEC]), sec.to_bytes(4, order, signed=True),
                     nanosec.to_bytes(4, order), bytes(raw[_END:])))
