-- innet spill-link shim (SPEC section 1; models/headers.py: Spill), EtherType 0x88B5 after the outer Ethernet.
-- op:8 port:8 flow:16 seq:16 count:8 resv:8; DATA (1) and RETURN (2) carry the whole original frame after
-- it (decoded as Ethernet), DRAIN (3) asks for `count` packets of `port`.
-- Field names are the scapy layer's: spill.op ... spill.resv.
local ETHERTYPE_SPILL = 0x88B5
local HEADER = 8
local OPS = { [1] = "DATA", [2] = "RETURN", [3] = "DRAIN" }

local spill = Proto("spill", "innet spill-link header")
local f = spill.fields
f.op = ProtoField.uint8("spill.op", "Operation", base.DEC, OPS)
f.port = ProtoField.uint8("spill.port", "Egress port", base.DEC)
f.flow = ProtoField.uint16("spill.flow", "Flow", base.DEC)
f.seq = ProtoField.uint16("spill.seq", "Sequence number", base.DEC)
f.count = ProtoField.uint8("spill.count", "Drain count", base.DEC)
f.resv = ProtoField.uint8("spill.resv", "Reserved", base.HEX)
local e_short = ProtoExpert.new("spill.short", "Spill header truncated", expert.group.MALFORMED,
                                expert.severity.ERROR)
local e_op = ProtoExpert.new("spill.bad_op", "Unknown spill operation", expert.group.MALFORMED,
                             expert.severity.WARN)
spill.experts = { e_short, e_op }
local eth = Dissector.get("eth_withoutfcs")
local data = Dissector.get("data")

function spill.dissector(tvb, pinfo, tree)
    local length = tvb:len()
    local t = tree:add(spill, tvb(0, math.min(length, HEADER)))
    if length < HEADER then
        t:add_proto_expert_info(e_short)
        return length
    end
    local op = tvb(0, 1):uint()
    t:add(f.op, tvb(0, 1))
    t:add(f.port, tvb(1, 1))
    t:add(f.flow, tvb(2, 2))
    t:add(f.seq, tvb(4, 2))
    t:add(f.count, tvb(6, 1))
    t:add(f.resv, tvb(7, 1))
    local name = OPS[op]
    if not name then t:add_proto_expert_info(e_op) end
    local text = string.format("%s port %d flow %d seq %d", name or ("op " .. op), tvb(1, 1):uint(),
                               tvb(2, 2):uint(), tvb(4, 2):uint())
    if op == 3 then text = text .. string.format(" count %d", tvb(6, 1):uint()) end
    t:append_text(", " .. text)
    if (op == 1 or op == 2) and length > HEADER then
        eth:call(tvb(HEADER):tvb(), pinfo, tree)   -- the inner frame sets the columns ...
        pinfo.cols.protocol:prepend("SPILL/")      -- ... and the spill op stays visible
        pinfo.cols.info:prepend("[Spill " .. text .. "] ")
    else
        pinfo.cols.protocol = "SPILL"
        pinfo.cols.info = "Spill " .. text
        if length > HEADER then data:call(tvb(HEADER):tvb(), pinfo, tree) end
    end
    return length
end

DissectorTable.get("ethertype"):add(ETHERTYPE_SPILL, spill)
