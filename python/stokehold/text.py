"""Text stages for :class:`stokehold.Loader`: tokenization on the loader's native threads, for
datasets of text too small to be worth packing (``stokehold pack --tokenizer`` and
:class:`stokehold.SequenceLoader` are the way for pre-training corpora)::

    loader = stokehold.Loader(ds, 64, transforms={"text": [Tokenize("tokenizer.json", max_length=128)]})
    batch["text"]  # int32 [64, 128], padded with pad_id

Without ``max_length`` each sample is a 1-d array of its own length (a list column).

:class:`ChatTemplate` renders conversations with the model's chat template, tokenizes them and
computes the loss mask, natively (the same tokens and mask as ``transformers``'
``apply_chat_template``; ``docs/text.md``).
"""

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._native import ConfigError, Tokenizer, _ChatTemplate

__all__ = ["ChatTemplate", "Documents", "Tokenize", "Tokenizer"]


class Tokenize:
    """Tokenize a string field with a Hugging Face ``tokenizer.json`` (any model), natively.

    :param tokenizer: path of the ``tokenizer.json``.
    :param max_length: truncate to this many ids and pad to it (a fixed ``[batch, max_length]``
        column); ``None`` gives variable-length arrays.
    :param dtype: ``"int32"`` or ``"int64"``.
    :param pad_id: the padding id (default: the id of ``<pad>`` or ``[PAD]``, else 0).
    :param bos: a token name put before the text (e.g. ``"<s>"``).
    :param eos: a token name put after it (e.g. ``"</s>"``).
    The tokenizer's own post-processor (special tokens) is not applied: ``bos``/``eos`` are explicit.
    """

    def __init__(
        self,
        tokenizer: Union[str, "os.PathLike[str]"],
        max_length: Optional[int] = None,
        *,
        dtype: str = "int32",
        pad_id: Optional[int] = None,
        bos: Optional[str] = None,
        eos: Optional[str] = None,
    ) -> None:
        self.tokenizer = os.fspath(tokenizer)
        self.max_length = max_length
        self.dtype = dtype
        self.pad_id = pad_id
        self.bos = bos
        self.eos = eos

    def _params(self) -> Dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "max_length": self.max_length,
            "dtype": self.dtype,
            "pad_id": self.pad_id,
            "bos": self.bos,
            "eos": self.eos,
        }

    def _spec(self) -> Dict[str, Any]:
        return {"name": "tokenize", "params": self._params()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"Tokenize({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenize) and other._spec() == self._spec()


class Documents:
    """Plain text packed whole beside conversations: each record's ``field`` (a string) is one
    document, tokenized natively with the ``tokenizer.json`` (no chat template, no special tokens
    of the tokenizer's own), ``bos``/``eos`` around it, the loss on every token. Give it where a
    :class:`ChatTemplate` goes in ``SequenceLoader(..., packing="whole")``: as ``text=`` for a
    dataset of documents, or for one source of a :class:`stokehold.Mixture` of conversations and
    text (``text={"chat": ChatTemplate(...), "web": Documents(...)}``; docs/text.md).

    :param tokenizer: a ``tokenizer.json``, or a directory holding one.
    :param field: the field holding the text.
    :param bos: a token name put before each document (e.g. ``"<s>"``), or ``None``.
    :param eos: a token name put after it (e.g. ``"</s>"``, so that the model learns where a
        document ends), or ``None``.
    :raises ConfigError: the tokenizer cannot be loaded, or ``bos``/``eos`` is not one of its
        tokens (when the loader is made).
    """

    def __init__(
        self,
        tokenizer: Union[str, "os.PathLike[str]"],
        field: str = "text",
        *,
        bos: Optional[str] = None,
        eos: Optional[str] = None,
    ) -> None:
        if not isinstance(field, str) or not field:
            raise ConfigError(f"field must be a field name (a non-empty string), got {field!r}")
        for name, v in (("bos", bos), ("eos", eos)):
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"{name} must be a token name (a string) or None, got {v!r}")
        self.tokenizer = os.fspath(tokenizer)
        self.field = field
        self.bos = bos
        self.eos = eos

    def _spec(self) -> Dict[str, Any]:
        """What the engine's packed loader takes: a template spec in document mode."""
        return dict(tokenizer=self.tokenizer, messages=self.field, loss_on="all", document=dict(bos=self.bos, eos=self.eos))

    def __repr__(self) -> str:
        return f"Documents({self.tokenizer!r}, field={self.field!r}, bos={self.bos!r}, eos={self.eos!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Documents) and other._spec() == self._spec()


class ChatTemplate:
    """A model's chat template, rendered, tokenized and masked natively (no Python per token).

    Gives the same ``input_ids`` as ``transformers``'
    ``tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
    return_assistant_tokens_mask=True)``, and for templates with ``{% generation %}`` blocks
    the same ``assistant_masks``.

    :param tokenizer: a ``tokenizer.json``, or a directory holding ``tokenizer.json`` and
        ``tokenizer_config.json`` (a ``tokenizer_config.json`` beside a ``tokenizer.json`` file is
        read too); the config gives the default template (``chat_template``: a string, or a list
        of named templates of which ``"default"`` is used) and ``bos_token``, ``eos_token``, ...
    :param template: the template's text, or the name of one of the config's named templates
        (default: the config's).
    :param messages: the field holding the conversation when a row (a dict) is passed (with
        ``completion=``, the prompt's field).
    :param loss_on: ``"assistant"`` (the default for conversations): tokens inside
        ``{% generation %}`` blocks, or, for templates without them, each assistant message's
        content and the end-of-turn token after it; ``"last"``: the same for the last assistant
        turn only; ``"all"``: every token; ``"completion"`` (the default for pairs): the
        tokens after the prompt's.
    :param completion: the field of a prompt/completion pair's completion (TRL's
        prompt-completion form): each example is then a pair, from a row (``messages`` the
        prompt's field) or a ``(prompt, completion)`` tuple. Two lists of messages are encoded
        as TRL's ``SFTTrainer`` does: the prompt rendered alone with the generation prompt, and
        prompt + completion rendered as one conversation, the loss on the tokens after the
        prompt's; two strings are tokenized as the prompt and as prompt + completion (special
        tokens added, ``eos_token`` appended to the completion unless it ends with it).
    :param add_generation_prompt: as ``apply_chat_template``'s (``False`` for training data).
    :param template_kwargs: more variables for the template (``apply_chat_template``'s
        ``**kwargs``: ``tools``, ``documents``, ``date_string``, ...).
    :param images: the field of a row holding the sample's images (a list), for conversations
        whose messages hold ``{"type": "image"}`` parts: the k-th image part takes the k-th image.
    :param vision: the vision processor (:class:`stokehold.vision.Qwen2VL`) that says how many
        tokens each image becomes: each image placeholder the template renders is expanded to
        that many, as ``transformers``' processors do (``Qwen2VLProcessor.apply_chat_template``).
    :param image_token: the placeholder token the template renders per image.
    :raises ConfigError: the tokenizer, its config or the template cannot be loaded or compiled;
        when encoding, a conversation the template raises on (the message names its index and
        the template's message) or that is not a list of messages.
    """

    def __init__(
        self,
        tokenizer: Union[str, "os.PathLike[str]"],
        template: Optional[str] = None,
        messages: str = "messages",
        loss_on: Optional[str] = None,
        *,
        add_generation_prompt: bool = False,
        template_kwargs: Optional[Dict[str, Any]] = None,
        images: Optional[str] = None,
        vision: Any = None,
        image_token: str = "<|image_pad|>",
        completion: Optional[str] = None,
    ) -> None:
        if loss_on is None:
            loss_on = "assistant" if completion is None else "completion"
        if completion is not None and (images is not None or vision is not None):
            raise ConfigError("prompt/completion pairs (completion=) take no images yet: give conversations with image parts")
        self.completion = completion
        self.tokenizer = os.fspath(tokenizer)
        self.images = images
        self.vision = vision
        self.image_token = image_token
        self.messages = messages
        self.loss_on = loss_on
        self.add_generation_prompt = add_generation_prompt
        self.template_kwargs = dict(template_kwargs or {})
        self._template_arg = template
        self._native = _ChatTemplate(
            self.tokenizer,
            template,
            messages,
            loss_on,
            add_generation_prompt,
            self.template_kwargs,
            completion,
        )
        self._image_token_id: Optional[int] = None
        if vision is not None:
            if not hasattr(vision, "num_tokens"):
                raise ConfigError(f"vision must be a vision processor (stokehold.vision.Qwen2VL), got {vision!r}")
            self._image_token_id = self._native.token_id(image_token)
            if self._image_token_id is None:
                raise ConfigError(
                    f"image_token {image_token!r} is not a token of the tokenizer {self.tokenizer}: "
                    "give the placeholder token its chat template renders per image"
                )
        elif images is not None:
            raise ConfigError("images= needs vision= (the processor that says how many tokens an image becomes)")

    def _image_tokens(self, conversation: Any, images: Optional[Sequence[Any]], index: int) -> Optional[Tuple[int, List[int]]]:
        """The expansion of one conversation's image placeholders: (placeholder id, tokens per image)."""
        if self.vision is None:
            if images is not None:
                raise ConfigError("images were given to a ChatTemplate without vision=")
            return None
        if images is None:
            if self.images is not None and isinstance(conversation, Mapping):
                images = conversation.get(self.images)
            images = [] if images is None else images
        counts = []
        for k, im in enumerate(images):
            if isinstance(im, (bytes, bytearray, memoryview)):
                w, h = self.vision.dimensions(bytes(im))
            elif isinstance(im, (tuple, list)) and len(im) == 2:
                w, h = im
            else:
                raise ConfigError(
                    f"conversation {index}: image {k} is neither encoded bytes nor a (width, height) pair: {type(im).__name__}"
                )
            counts.append(int(self.vision.num_tokens(int(w), int(h))))
        assert self._image_token_id is not None
        return (self._image_token_id, counts)

    def _spec(self) -> Dict[str, Any]:
        """What the engine's packed-conversation loader takes (the template as plain data)."""
        spec = dict(
            tokenizer=self.tokenizer,
            template=self._template_arg,
            messages=self.messages,
            loss_on=self.loss_on,
            add_generation_prompt=self.add_generation_prompt,
            template_kwargs=self.template_kwargs,
            completion=self.completion,
        )
        if self.vision is not None:
            proc = self.vision._spec() if hasattr(self.vision, "_spec") else None
            if not proc or proc.get("name") != "qwen2vl":
                raise ConfigError(f"packing conversations with images takes a stokehold.vision.Qwen2VL processor, got {self.vision!r}")
            vision = dict(image_token=self.image_token, processor=proc["params"])
            if self.images is not None:
                vision["images"] = self.images  # else the engine's default field, "images"
            spec["vision"] = vision
        return spec

    @property
    def template(self) -> str:
        """The template's text."""
        return self._native.template

    @property
    def has_generation(self) -> bool:
        """Whether the template marks ``{% generation %}`` blocks."""
        return self._native.has_generation

    def render(self, conversation: Any) -> str:
        """The text the template renders for one conversation (a list of messages, or a row
        holding one under :attr:`messages`)."""
        return self._native.render(conversation)

    def encode(self, conversation: Any, images: Optional[Sequence[Any]] = None) -> Dict[str, Any]:
        """Encode one conversation: ``{"input_ids": int32 array, "assistant_masks": uint8
        array}`` (1 where the loss applies, per ``loss_on``).

        With ``vision=``, each image placeholder is expanded to its image's tokens; ``images``
        (default: the row's :attr:`images` field) lists the sample's images as encoded bytes
        (only the header is read) or ``(width, height)`` pairs."""
        ids, mask = self._native.encode(conversation, self._image_tokens(conversation, images, 0))
        return {"input_ids": ids, "assistant_masks": mask}

    def encode_batch(
        self, conversations: Iterable[Any], threads: int = 0, images: Optional[Sequence[Optional[Sequence[Any]]]] = None
    ) -> Dict[str, Any]:
        """Encode many conversations on ``threads`` native threads (0: every core), without the
        GIL: ``{"input_ids": int32, "assistant_masks": uint8, "offsets": int64 [n + 1]}``, the
        tokens of conversation ``i`` being ``input_ids[offsets[i]:offsets[i + 1]]``. ``images``:
        per conversation, as :meth:`encode`'s."""
        convs = list(conversations)
        expand: Optional[Tuple[int, List[List[int]]]] = None
        if self.vision is not None or images is not None:
            per = list(images) if images is not None else [None] * len(convs)
            if len(per) != len(convs):
                raise ConfigError(f"images are given for {len(per)} conversations, not {len(convs)}")
            placeholder: Optional[int] = None
            counts: List[List[int]] = []
            for i, (c, im) in enumerate(zip(convs, per)):
                part = self._image_tokens(c, im, i)
                if part is not None:
                    placeholder = part[0]
                    counts.append(part[1])
            if placeholder is not None:
                expand = (placeholder, counts)
        ids, masks, offsets = self._native.encode_batch(convs, threads, expand)
        return {"input_ids": ids, "assistant_masks": masks, "offsets": offsets}

    def __reduce__(self) -> Tuple[Any, ...]:
        return (
            _rebuild_chat_template,
            (
                self.tokenizer,
                self._template_arg,
                self.messages,
                self.loss_on,
                self.add_generation_prompt,
                self.template_kwargs,
                self.images,
                self.vision,
                self.image_token,
                self.completion,
            ),
        )

    def __repr__(self) -> str:
        pair = "" if self.completion is None else f", completion={self.completion!r}"
        return (
            f"ChatTemplate({self.tokenizer!r}, messages={self.messages!r}, "
            f"loss_on={self.loss_on!r}{pair})"
        )


def _rebuild_chat_template(
    tokenizer: str,
    template: Optional[str],
    messages: str,
    loss_on: str,
    add_generation_prompt: bool,
    template_kwargs: Dict[str, Any],
    images: Optional[str] = None,
    vision: Any = None,
    image_token: str = "<|image_pad|>",
    completion: Optional[str] = None,
) -> ChatTemplate:
    return ChatTemplate(
        tokenizer,
        template,
        messages,
        loss_on,
        add_generation_prompt=add_generation_prompt,
        template_kwargs=template_kwargs,
        images=images,
        vision=vision,
        image_token=image_token,
        completion=completion,
    )
