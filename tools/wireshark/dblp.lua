-- innet DBLP bounded-loss round shim (SPEC section 4; models/headers.py: DBLP), after UDP port 48872 (0xBEE8).
-- ver:4 last:1 retx:1 fresv:2 | phase:4 resv:4 | job:8 | round:16 | idx:16 | cnt:16 | resv2:16; payload after.
-- Field names are the scapy layer's: dblp.ver ... dblp.resv2.
local DBLP_PORT = 48872
local HEADER = 11

local dblp = Proto("dblp", "innet DBLP round header")
local f = dblp.fields
f.ver = ProtoField.uint8("dblp.ver", "Version", base.DEC, nil, 0xF0)
f.last = ProtoField.uint8("dblp.last", "LAST", base.DEC, nil, 0x08)
f.retx = ProtoField.uint8("dblp.retx", "RETX", base.DEC, nil, 0x04)
f.fresv = ProtoField.uint8("dblp.fresv", "Reserved flags", base.HEX, nil, 0x03)
f.phase = ProtoField.uint8("dblp.phase", "Phase", base.DEC, nil, 0xF0)
f.resv = ProtoField.uint8("dblp.resv", "Reserved", base.HEX, nil, 0x0F)
f.job = ProtoField.uint8("dblp.job", "Job", base.DEC)
f.round = ProtoField.uint16("dblp.round", "Round", base.DEC)
f.idx = ProtoField.uint16("dblp.idx", "Chunk index", base.DEC)
f.cnt = ProtoField.uint16("dblp.cnt", "Chunks in round", base.DEC)
f.resv2 = ProtoField.uint16("dblp.resv2", "Reserved", base.HEX)
local e_short = ProtoExpert.new("dblp.short", "DBLP header truncated", expert.group.MALFORMED, expert.severity.ERROR)
dblp.experts = { e_short }
local data = Dissector.get("data")

function dblp.dissector(tvb, pinfo, tree)
    local length = tvb:len()
    pinfo.cols.protocol = "DBLP"
    local t = tree:add(dblp, tvb(0, math.min(length, HEADER)))
    if length < HEADER then
        t:add_proto_expert_info(e_short)
        return length
    end
    for _, name in ipairs({"ver", "last", "retx", "fresv"}) do t:add(f[name], tvb(0, 1)) end
    t:add(f.phase, tvb(1, 1))
    t:add(f.resv, tvb(1, 1))
    t:add(f.job, tvb(2, 1))
    t:add(f.round, tvb(3, 2))
    t:add(f.idx, tvb(5, 2))
    t:add(f.cnt, tvb(7, 2))
    t:add(f.resv2, tvb(9, 2))
    local flags = tvb(0, 1):uint()
    local text = string.format("job %d round %d chunk %d/%d phase %d%s%s", tvb(2, 1):uint(), tvb(3, 2):uint(),
                               tvb(5, 2):uint(), tvb(7, 2):uint(), bit.rshift(tvb(1, 1):uint(), 4),
                               bit.band(flags, 0x08) ~= 0 and " LAST" or "", bit.band(flags, 0x04) ~= 0 and " RETX" or "")
    t:append_text(", " .. text)
    pinfo.cols.info = "DBLP " .. text
    if length > HEADER then data:call(tvb(HEADER):tvb(), pinfo, tree) end
    return length
end

DissectorTable.get("udp.port"):add(DBLP_PORT, dblp)
