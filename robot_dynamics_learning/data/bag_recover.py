"""
Recover the intact messages of a crashed rosbag2 recording into a new, readable bag.

A recorder killed hard (power loss, out of memory, kill -9) leaves no metadata.yaml, and an
MCAP file without its summary and end magic: rosbags, and so every reader here, refuses both.
The storage files still hold every message written before the crash. `recover_bag` reads
them record by record (MCAP with the `mcap` library's stream reader, sqlite3 through its
own tables) up to the first damaged record, and writes those messages, their serialized
bytes unchanged, into a version-8 bag that every tool reads, with each topic's offered QoS
profiles as recorded (a latched /tf_static must stay transient local when played back).
"""
from dataclasses import dataclass, field
from pathlib import Path
import re
import sqlite3
import struct
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

from mcap.exceptions import McapError
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from robot_dynamics_learning.data.bag_io import close_or_discard, named_typestore, STORAGES
from rosbags.rosbag2 import ReaderError, Writer
from rosbags.rosbag2.metadata import parse_qos
from rosbags.typesys import get_types_from_msg
from tqdm import tqdm

STORAGE_SUFFIXES = ('.mcap', '.db3')
PathLike = Union[str, Path]


class RawMessage(NamedTuple):
    """One serialized message as a storage file holds it."""

    topic: str
    msgtype: str
    msgdef: str          # the recorded definition ('' where the file has none: Humble sqlite3)
    receive_ns: int
    data: bytes
    qos: str = ''        # the offered QoS profiles as recorded (YAML), '' where unknown


@dataclass
class RecoveryReport:
    """What `recover_bag` kept: messages per topic, and where each storage file ended."""

    messages: Dict[str, int] = field(default_factory=dict)
    ended: Dict[str, str] = field(default_factory=dict)   # file -> 'complete' or the damage
    skipped_topics: Dict[str, str] = field(default_factory=dict)   # topic -> why


def storage_files(source: Path) -> List[Path]:
    """Return the storage files of a bag folder (split files in their order) or the file."""
    if source.is_file():
        if source.suffix not in STORAGE_SUFFIXES:
            raise ValueError(f'{source}: not an .mcap or .db3 storage file')
        return [source]
    if not source.is_dir():
        raise FileNotFoundError(f'no bag at {source}')
    files = [p for p in source.iterdir() if p.suffix in STORAGE_SUFFIXES]
    if not files:
        raise ValueError(f'{source}: no .mcap or .db3 storage file to recover')
    return sorted(files, key=_split_index)


def _split_index(path: Path) -> Tuple[str, int]:
    """Order split files as the recorder wrote them (bag_0, bag_1, ..., bag_10)."""
    match = re.search(r'_(\d+)$', path.stem)
    return (path.stem[:match.start()] if match else path.stem,
            int(match.group(1)) if match else -1)


def mcap_messages(path: Path, report: RecoveryReport) -> Iterator[RawMessage]:
    """Yield the messages of an MCAP file up to its first damaged record."""
    schemas: Dict[int, Schema] = {}
    channels: Dict[int, Channel] = {}
    with open(path, 'rb') as stream:
        try:
            for record in StreamReader(stream).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Message):
                    channel = channels[record.channel_id]
                    schema = schemas.get(channel.schema_id)
                    if schema is None or channel.message_encoding != 'cdr':
                        report.skipped_topics.setdefault(
                            channel.topic, f'encoding {channel.message_encoding!r} without a '
                            'ROS 2 schema')
                        continue
                    yield RawMessage(channel.topic, schema.name,
                                     schema.data.decode('utf-8', 'replace'), record.log_time,
                                     bytes(record.data),
                                     channel.metadata.get('offered_qos_profiles', ''))
            report.ended[str(path)] = 'complete'
        except (McapError, KeyError, struct.error, ValueError) as error:
            report.ended[str(path)] = _damage(error, stream.tell())


def sqlite_messages(path: Path, report: RecoveryReport) -> Iterator[RawMessage]:
    """Yield the messages of a rosbag2 sqlite3 file in write order, up to any damage."""
    database = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    try:
        topics = {row[0]: row[1:] for row in database.execute(
            'SELECT id, name, type, offered_qos_profiles FROM topics')}
        definitions = _sqlite_definitions(database)
        rows = database.execute('SELECT topic_id, timestamp, data FROM messages ORDER BY id')
        for topic_id, stamp, data in rows:
            topic, msgtype, qos = topics[topic_id]
            yield RawMessage(topic, msgtype, definitions.get(msgtype, ''), stamp, bytes(data),
                             qos or '')
        report.ended[str(path)] = 'complete'
    except (sqlite3.DatabaseError, KeyError) as error:
        report.ended[str(path)] = _damage(error, None)
    finally:
        database.close()


def _sqlite_definitions(database: sqlite3.Connection) -> Dict[str, str]:
    """Return type -> definition from a Jazzy bag's message_definitions table (Humble: none)."""
    try:
        return {row[0]: row[1] for row in database.execute(
            'SELECT topic_type, encoded_message_definition FROM message_definitions '
            'WHERE encoding = ?', ('ros2msg',))}
    except sqlite3.OperationalError:   # no such table
        return {}


def _damage(error: Exception, offset: Optional[int]) -> str:
    where = '' if offset is None else f' near byte {offset}'
    return f'damaged{where}: {type(error).__name__}: {error}'.rstrip(': ')


def recover_bag(source: PathLike, out: PathLike, storage: str = 'mcap',
                typestore: str = 'jazzy', progress: bool = False) -> RecoveryReport:
    """
    Write every intact message of the storage files of `source` into a new bag at `out`.

    Types come from the typestore, or from the recorded definitions for types it lacks; a
    topic of an unknown type without a recorded definition is skipped (in the report).
    """
    source, out = Path(source), Path(out)
    if storage not in STORAGES:
        raise ValueError(f'unknown storage {storage!r}; choose from {sorted(STORAGES)}')
    if out.exists():
        raise ValueError(f'{out} exists; give a new folder for the recovered bag')
    files = storage_files(source)
    store = named_typestore(typestore)
    report = RecoveryReport()
    writer = Writer(out, version=8, storage_plugin=STORAGES[storage])
    writer.open()
    connections: Dict[Tuple[str, str], object] = {}
    failed = True
    try:
        for path in files:
            read = mcap_messages if path.suffix == '.mcap' else sqlite_messages
            for message in tqdm(read(path, report), disable=not progress, unit='msg',
                                desc=path.name, leave=False):
                if message.topic in report.skipped_topics:
                    continue
                key = (message.topic, message.msgtype)
                connection = connections.get(key)
                if connection is None:
                    connection = _connection(writer, store, message, report)
                    if connection is None:
                        continue
                    connections[key] = connection
                writer.write(connection, message.receive_ns, message.data)
                report.messages[message.topic] = report.messages.get(message.topic, 0) + 1
        failed = False
    finally:
        close_or_discard(writer, out, failed)
    return report


def _connection(writer: Writer, store, message: RawMessage, report: RecoveryReport):
    """Add the topic's connection, registering its type from the recorded definition."""
    if message.msgtype not in store.fielddefs:
        if not message.msgdef:
            report.skipped_topics[message.topic] = (f'type {message.msgtype} is unknown and '
                                                    'the file holds no definition of it')
            return None
        try:
            store.register(get_types_from_msg(message.msgdef, message.msgtype))
        except Exception as error:  # noqa: B902 - rosbags' parser raises several types
            report.skipped_topics[message.topic] = (f'definition of {message.msgtype} '
                                                    f'unreadable: {error}')
            return None
    try:
        qos = parse_qos(message.qos)
    except ReaderError:   # unreadable profiles: the player's defaults, as before
        qos = []
    return writer.add_connection(message.topic, message.msgtype, typestore=store,
                                 offered_qos_profiles=qos)
