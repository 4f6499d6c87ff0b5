"""The languages reports are written in (one message catalog each under messages/)."""

LANGUAGES = ("en", "zh")
