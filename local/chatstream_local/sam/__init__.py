"""The SAM CLI's local commands, without Docker: ``make invoke`` (:mod:`.invoke`, ``sam local invoke``) on the
local stack, with the chat data the sample events refer to (:mod:`.samples`)."""
