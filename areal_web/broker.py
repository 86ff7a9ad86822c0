"""The embedded default's Celery broker: kombu's filesystem transport with atomic message files.

kombu's own `_put` creates the message file and then writes it, and a consumer polling the folder may take
the file in between and read it empty: the worker then dies on a JSONDecodeError ("Unrecoverable error"),
which the demo hit with its beat ticking every few seconds. Here a message is written under a name no
consumer looks at (`.part`) and renamed into place, which is atomic within one folder.
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class AtomicChannel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # "<queue>.msg.part" never matches a consumer's "<queue>.msg"
        try:
            with open(partial, "wb", buffering=0) as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as error:
            raise ChannelError(f"Cannot add file {final!r} to directory") from error


class AtomicFilesystemTransport(filesystem.Transport):
    Channel = AtomicChannel
